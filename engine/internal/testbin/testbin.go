package testbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// Binary is the apollo binary of one test process: built on first use,
// removed by Remove (from the package's TestMain).
type Binary struct {
	once sync.Once
	path string
	dir  string
	err  error
}

// Path builds the binary (static: CGO_ENABLED=0, as the README builds it),
// once, and returns its path. go build writes it
// to a folder of the temp dir named after the module's folder and kept
// between test processes, where it skips the link (3-4 s) when the binary
// there is up to date; the caller gets a hard link of it in a folder of
// its own, so that another process rebuilding it cannot swap it under the
// tests.
func (b *Binary) Path() (string, error) {
	b.once.Do(func() { b.path, b.err = b.build() })
	return b.path, b.err
}

func (b *Binary) build() (string, error) {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..", "..")
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	cached := filepath.Join(os.TempDir(), "apollo-test-bin-"+hex.EncodeToString(sum[:6]), "apollo")
	cmd := exec.Command("go", "build", "-o", cached, "apollo")
	cmd.Dir = root
	// The static build the README installs, whatever the test process's
	// own cgo setting.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	dir, err := os.MkdirTemp("", "apollo-bin-")
	if err != nil {
		return "", err
	}
	b.dir = dir
	bin := filepath.Join(dir, "apollo")
	if err := os.Link(cached, bin); err != nil {
		return "", err
	}
	return bin, nil
}

// Remove removes this process's copy of the binary, if it was built.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
