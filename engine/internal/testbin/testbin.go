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

// Path builds the binary (static: CGO_ENABLED=0, as the README builds it;
// with the race detector when Race), once, and returns its path. go build writes it
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
	// The static build the README installs, whatever the test process's
	// own cgo setting; with the race detector (which needs cgo) when asked.
	args, cgo := []string{"build", "-o", cached}, "CGO_ENABLED=0"
	if Race() {
		cached += "-race"
		args, cgo = []string{"build", "-race", "-o", cached}, "CGO_ENABLED=1"
	}
	cmd := exec.Command("go", append(args, "apollo")...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), cgo)
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

// EnvRace asks for the binary built with the race detector:
// APOLLO_TEST_RACE=1 go test ./engine/nemesis/ runs the nemesis against a
// coordinator, workers and hub nodes that report their data races.
const EnvRace = "APOLLO_TEST_RACE"

// Race reports whether the binary is built with the race detector.
func Race() bool { return os.Getenv(EnvRace) == "1" }

// RaceEnv is the environment entry that makes the race detector of a
// binary built with it write each process's reports to dir (as
// race.PID files) instead of its standard error, where a test can find
// them whatever became of the process's output.
func RaceEnv(dir string) string {
	return "GORACE=log_path=" + filepath.Join(dir, "race")
}

// RaceReports returns the race detector's reports written under dir by
// the processes given RaceEnv(dir).
func RaceReports(dir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "race.*"))
	if err != nil {
		return nil, err
	}
	var reports []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		reports = append(reports, string(b))
	}
	return reports, nil
}

// Remove removes this process's copy of the binary, if it was built.
func (b *Binary) Remove() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
