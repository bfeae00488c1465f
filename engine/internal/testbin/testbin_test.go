package testbin

import (
	"bytes"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestBinary: the binary is built once per Binary and runs; each Binary
// has a copy of its own, which Remove deletes and nothing else.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds the apollo binary")
	}
	var a, b Binary
	pa, err := a.Path()
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := a.Path(); again != pa {
		t.Errorf("a second Path is %s, want the first's %s", again, pa)
	}
	out, err := exec.Command(pa, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "apollo") {
		t.Fatalf("%s version: %v %s", pa, err, out)
	}
	if interp := interpreter(t, pa); interp != "" && !Race() {
		t.Errorf("the tests' binary is loaded by %s: want the static build the README installs (CGO_ENABLED=0)", interp)
	}
	pb, err := b.Path()
	if err != nil {
		t.Fatal(err)
	}
	if pb == pa {
		t.Fatalf("two Binaries share the copy %s", pa)
	}
	a.Remove()
	if _, err := os.Stat(pa); !os.IsNotExist(err) {
		t.Errorf("after Remove, %s: %v, want it gone", pa, err)
	}
	if _, err := os.Stat(pb); err != nil {
		t.Errorf("another Binary's copy went with it: %v", err)
	}
	b.Remove()
}

// interpreter is the dynamic loader an ELF binary names ("" for a static
// binary, or where binaries are not ELF).
func interpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		return "" // not ELF (macOS): nothing to check
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, err := io.ReadAll(p.Open())
			if err != nil {
				t.Fatal(err)
			}
			return string(bytes.TrimRight(b, "\x00"))
		}
	}
	return ""
}
