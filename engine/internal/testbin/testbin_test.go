package testbin

import (
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
