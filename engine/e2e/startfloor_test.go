package e2e_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// librariesOnly builds, in a folder of its own, a program that links every
// package apollo's own packages import and does nothing else: its main
// returns at once. What it costs to start is the Go runtime's set-up for
// that much code and the linked packages' initialisers, which Go runs
// before main whatever the command — the floor under `apollo --help` that
// no change to apollo's own code can go below. It is built as apollo is
// (static, the module's own go.mod and go.sum) and returns the program's
// path and how many packages it imports.
func librariesOnly(tb testing.TB) (string, int) {
	tb.Helper()
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	imports, err := libraryImports(root)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		tb.Fatal(err)
	}
	first, rest, _ := bytes.Cut(mod, []byte("\n"))
	if !bytes.Equal(bytes.TrimSpace(first), []byte("module apollo")) {
		tb.Fatalf("go.mod begins %q, not the module apollo", first)
	}
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		tb.Fatal(err)
	}
	var prog strings.Builder
	prog.WriteString("// Command libraries links what apollo links and returns.\npackage main\n\nimport (\n")
	for _, p := range imports {
		fmt.Fprintf(&prog, "\t_ %q\n", p)
	}
	prog.WriteString(")\n\nfunc main() {}\n")
	for name, text := range map[string][]byte{
		"go.mod":  append([]byte("module libraries\n"), rest...),
		"go.sum":  sum,
		"main.go": []byte(prog.String()),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), text, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "libraries")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("building the program that only links apollo's libraries: %v\n%s", err, out)
	}
	return bin, len(imports)
}

// libraryImports lists, sorted, every package that a package of the apollo
// binary imports and that is not apollo's own: the standard library's and
// the dependencies' packages the binary links directly.
func libraryImports(root string) ([]string, error) {
	list := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", ".")
	list.Dir = root
	out, err := list.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps of apollo: %w", err)
	}
	own := func(p string) bool { return p == "apollo" || strings.HasPrefix(p, "apollo/") }
	seen := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 || !own(fields[0]) {
			continue
		}
		for _, p := range fields[1:] {
			if !own(p) && p != "C" && p != "unsafe" {
				seen[p] = true
			}
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("go list -deps of apollo named no package apollo imports")
	}
	imports := make([]string, 0, len(seen))
	for p := range seen {
		imports = append(imports, p)
	}
	slices.Sort(imports)
	return imports, nil
}
