package engine

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// arrow is one line of doc.go's import table: "name → a, b; c".
var arrow = regexp.MustCompile(`^//\t(\w+)\s+→ (.*)$`)

// TestImportArrows checks that the imports of every package under engine/
// (and of engine itself) are exactly those its line in doc.go lists.
func TestImportArrows(t *testing.T) {
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string][]string{}
	for _, line := range strings.Split(string(src), "\n") {
		m := arrow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		var deps []string
		if !strings.HasPrefix(m[2], "(") {
			for _, d := range strings.FieldsFunc(m[2], func(r rune) bool { return r == ',' || r == ';' }) {
				d = strings.TrimSpace(d)
				if slices.Contains([]string{"eventlog", "luart", "stdlib", "scripts"}, d) {
					d = "apollo/" + d
				} else {
					d = "apollo/engine/" + d
				}
				deps = append(deps, d)
			}
		}
		slices.Sort(deps)
		listed[m[1]] = deps
	}
	dirs, _ := filepath.Glob("*/doc.go")
	dirs = append(dirs, "doc.go")
	for _, doc := range dirs {
		dir := filepath.Dir(doc)
		name := filepath.Base(dir)
		if dir == "." {
			name = "engine"
		}
		if name == "internal" {
			continue
		}
		want, ok := listed[name]
		if !ok {
			t.Errorf("package %s has no line in doc.go", name)
			continue
		}
		if got := apolloImports(t, dir); !slices.Equal(got, want) {
			t.Errorf("package %s imports %v; doc.go lists %v", name, got, want)
		}
	}
}

// apolloImports lists the apollo packages the non-test files in dir import.
func apolloImports(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
	var out []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p := strings.Trim(imp.Path.Value, `"`)
			if strings.HasPrefix(p, "apollo/") && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out
}
