package eventlog

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestLockTaskExcludes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "task_t1.lock")
	if pid, held := Holder(path); held {
		t.Errorf("Holder(no lock file) = %d, held; want not held", pid)
	}
	l, err := LockTask(path)
	if err != nil {
		t.Fatal(err)
	}
	if pid, held := Holder(path); !held || pid != os.Getpid() {
		t.Errorf("Holder while locked = %d, %v; want %d, true", pid, held, os.Getpid())
	}
	// A second open in the same process is another open file description:
	// flock excludes it like another process.
	_, err = LockTask(path)
	var le *LockedError
	if !errors.As(err, &le) {
		t.Fatalf("second LockTask = %v, want a *LockedError", err)
	}
	if le.PID != os.Getpid() || le.Path != path {
		t.Errorf("LockedError{PID: %d, Path: %q}, want {%d, %q}", le.PID, le.Path, os.Getpid(), path)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Errorf("error %q does not name the holder's pid", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if pid, held := Holder(path); held {
		t.Errorf("Holder after Unlock = %d, held; want not held", pid)
	}
	l2, err := LockTask(path)
	if err != nil {
		t.Fatalf("LockTask after Unlock = %v", err)
	}
	if err := l2.Unlock(); err != nil {
		t.Fatal(err)
	}
}

// TestLockReleasedWhenHolderKilled: a runner killed with SIGKILL never
// leaves a stale lock. The holder is this test binary, re-executed.
func TestLockReleasedWhenHolderKilled(t *testing.T) {
	if os.Getenv("EVENTLOG_CHILD") == "lock" {
		lockChild(t, os.Getenv("EVENTLOG_PATH"))
		return
	}
	path := filepath.Join(t.TempDir(), "task_t1.lock")
	for round := range 5 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLockReleasedWhenHolderKilled$", "-test.count=1")
		cmd.Env = append(os.Environ(), "EVENTLOG_CHILD=lock", "EVENTLOG_PATH="+path)
		stdin, err := cmd.StdinPipe() // the child waits on it; we never write
		if err != nil {
			t.Fatal(err)
		}
		defer stdin.Close()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "locked") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: child said %q, %v; want \"locked\"", round, line, err)
		}
		child := cmd.Process.Pid
		if pid, held := Holder(path); !held || pid != child {
			t.Errorf("round %d: Holder = %d, %v; want the child %d, true", round, pid, held, child)
		}
		var le *LockedError
		if _, err := LockTask(path); !errors.As(err, &le) || le.PID != child {
			t.Errorf("round %d: LockTask while the child holds it = %v, want a *LockedError with pid %d", round, err, child)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if err := cmd.Wait(); err == nil {
			t.Fatalf("round %d: the child exited cleanly; want it killed", round)
		}
		if pid, held := Holder(path); held {
			t.Errorf("round %d: Holder after the kill = %d, held; want not held", round, pid)
		}
		l, err := LockTask(path)
		if err != nil {
			t.Fatalf("round %d: LockTask after the holder was killed = %v", round, err)
		}
		if pid, held := Holder(path); !held || pid != os.Getpid() {
			t.Errorf("round %d: Holder = %d, %v; want %d, true", round, pid, held, os.Getpid())
		}
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}
	}
}

func lockChild(t *testing.T, path string) {
	if _, err := LockTask(path); err != nil {
		t.Fatalf("child: %v", err)
	}
	fmt.Println("locked")
	os.Stdin.Read(make([]byte, 1)) // until killed
	t.Fatalf("child: not killed")
}
