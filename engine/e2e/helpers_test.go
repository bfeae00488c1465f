package e2e_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"apollo/engine/internal/testbin"
)

// The helpers every end-to-end test shares: the real binary, built once per
// test process, run in a folder with the test's environment, and what a run
// leaves behind.

// envInt reads a positive integer from the environment, or def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func longMode() bool { return os.Getenv("APOLLO_LONG") != "" }

// apollo is the real binary, built once per test process.
var apollo testbin.Binary

func TestMain(m *testing.M) {
	if spec := os.Getenv(spawnLoopEnv); spec != "" {
		// This process is BenchmarkWide's floor contender, not a test run.
		os.Exit(spawnLoop(spec))
	}
	code := m.Run()
	apollo.Remove()
	os.Exit(code)
}

func binary(t testing.TB) string {
	t.Helper()
	if testing.Short() && os.Getenv("APOLLO_E2E_SHORT") == "" {
		// Linking the binary alone takes 10 s: -short stays under a minute
		// with the root package's scripts, which run every command end to
		// end, as its check of the binary. APOLLO_E2E_SHORT=1 runs the
		// sweeps at their -short sizes.
		t.Skip("-short: the end-to-end sweeps build and run the real binary; go test -count=1 ./engine/e2e/ runs them, APOLLO_E2E_SHORT=1 at their -short sizes")
	}
	bin, err := apollo.Path()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// apolloCmd is the binary run in dir with the test's environment: a short
// kill grace, no colour, and a tag that finds its processes later.
func apolloCmd(t *testing.T, dir string, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary(t), args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "APOLLO_KILL_GRACE=100ms", "NO_COLOR=1", "APOLLO_TEST_RUN="+dir)
	cmd.Env = append(cmd.Env, env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// runKilledAfter runs the binary in dir with args and, unless it has
// exited first, kills it with SIGKILL once delay has passed: its process
// group (apollo and its steps) when group is set, else apollo alone, whose
// steps live on. It returns the invocation's result and how long it ran.
func runKilledAfter(t *testing.T, dir string, args []string, delay time.Duration, group bool) (runResult, time.Duration) {
	t.Helper()
	cmd := apolloCmd(t, dir, nil, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return waitResult(cmd, err, &stdout, &stderr), time.Since(began)
	case <-time.After(delay):
		if group {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		} else {
			syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		}
		return waitResult(cmd, <-exited, &stdout, &stderr), time.Since(began)
	}
}

// runResult is how one invocation ended.
type runResult struct {
	code   int // exit code; -1 when killed
	killed bool
	stdout string
	stderr string
	cpu    time.Duration // the process's user and system CPU
}

func waitResult(cmd *exec.Cmd, err error, stdout, stderr *bytes.Buffer) runResult {
	res := runResult{stdout: stdout.String(), stderr: stderr.String()}
	if ps := cmd.ProcessState; ps != nil {
		res.cpu = ps.UserTime() + ps.SystemTime()
	}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.killed, res.code = true, -1
		}
	default:
		res.code = -2
		res.stderr += err.Error()
	}
	return res
}

// runApollo runs the binary to its end.
func runApollo(t *testing.T, dir string, env []string, args ...string) runResult {
	t.Helper()
	cmd := apolloCmd(t, dir, env, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	return waitResult(cmd, cmd.Run(), &stdout, &stderr)
}

// taskLog returns the task's newest log in dir's state directory, or "".
func taskLog(dir, task string) string {
	logs, _ := filepath.Glob(filepath.Join(dir, ".apollo", "logs", "task_"+task+"_*.jsonl"))
	sort.Strings(logs)
	if len(logs) == 0 {
		return ""
	}
	return logs[len(logs)-1]
}

// countLines counts the lines of a file, 0 when it cannot be read.
func countLines(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte("\n"))
}

// writePipeline writes yaml as dir/pipeline.yaml.
func writePipeline(t *testing.T, dir, yaml string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "pipeline.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The exit codes of docs/spec.md §7.12, as the binary reports them.
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitLocked      = 3
	exitInterrupted = 130
)

// liveProcsWithEnv lists the pids of the processes, zombies left out, whose
// environment holds every one of entries ("NAME=value\x00").
func liveProcsWithEnv(entries ...[]byte) []string {
	var pids []string
	dirs, _ := os.ReadDir("/proc")
	for _, e := range dirs {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || slices.ContainsFunc(entries, func(want []byte) bool { return !bytes.Contains(env, want) }) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			continue
		}
		pids = append(pids, e.Name())
	}
	return pids
}
