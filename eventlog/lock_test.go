package eventlog

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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

// TestLockLost: a lock file deleted or replaced while held lets a second
// runner take a lock of its own; the first runner's writer, which checks
// its lock on every append, then stops with a *LockLostError and writes
// nothing more, so the log has one writer at a time.
func TestLockLost(t *testing.T) {
	tests := []struct {
		name     string
		take     func(t *testing.T, path string) // what happens to the lock file mid-run
		deleted  bool                            // LockLostError.Err is fs.ErrNotExist
		secondIn bool                            // a second LockTask then succeeds
	}{
		{"deleted", func(t *testing.T, path string) { mustRemove(t, path) }, true, true},
		{"replaced by rename", func(t *testing.T, path string) {
			other := path + ".other"
			if err := os.WriteFile(other, []byte("1\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, path); err != nil {
				t.Fatal(err)
			}
		}, false, true},
		{"deleted and made again", func(t *testing.T, path string) {
			mustRemove(t, path)
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			lockPath := filepath.Join(dir, "task_t1.lock")
			logPath := filepath.Join(dir, "task_t1_1735787045.jsonl")
			l1, err := LockTask(lockPath)
			if err != nil {
				t.Fatal(err)
			}
			defer l1.Unlock()
			w1 := openLog(t, logPath, WriterOptions{Lock: l1, First: taskStart()})
			mustAppend(t, w1, stepStart("a"))

			tt.take(t, lockPath)
			var lost *LockLostError
			if err := l1.Check(); !errors.As(err, &lost) || lost.Path != lockPath ||
				errors.Is(err, fs.ErrNotExist) != tt.deleted {
				t.Fatalf("Check after the lock file was %s = %v, want a *LockLostError (deleted: %v)", tt.name, err, tt.deleted)
			}
			l2, err := LockTask(lockPath)
			if err != nil {
				t.Fatalf("second LockTask = %v, want the new lock file locked", err)
			}
			defer l2.Unlock()
			w2 := openLog(t, logPath, WriterOptions{Lock: l2})
			mustAppend(t, w2, stepStart("b"))

			for i := range 2 { // the error sticks
				err := w1.Append(stepStart("late"))
				if !errors.As(err, &lost) || lost.Path != lockPath {
					t.Fatalf("append %d by the first writer after the loss = %v, want a *LockLostError", i+1, err)
				}
			}
			if err := w1.AppendDurable(stepStart("late")); !errors.As(err, &lost) {
				t.Errorf("AppendDurable after the loss = %v, want a *LockLostError", err)
			}
			if err := w1.Close(); !errors.As(err, &lost) {
				t.Errorf("Close after the loss = %v, want the *LockLostError", err)
			}
			mustAppend(t, w2, stepStart("c"))
			mustClose(t, w2)

			var got []string
			for _, r := range readClean(t, logPath) {
				got = append(got, r.EventType+" "+r.StepID)
			}
			want := []string{"TASK_START ", "STEP_START a", "STEP_START b", "STEP_START c"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("log holds %q, want %q: nothing of the first writer after the loss", got, want)
			}
			// A writer that never locked the task (apollo script) goes on.
			w3 := openLog(t, logPath, WriterOptions{})
			mustAppend(t, w3, stepStart("script"))
			mustClose(t, w3)
		})
	}
}

// TestOpenChecksLock: a writer does not open a log under a lock that is
// already lost.
func TestOpenChecksLock(t *testing.T) {
	dir := t.TempDir()
	lockPath := filepath.Join(dir, "task_t1.lock")
	l, err := LockTask(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	mustRemove(t, lockPath)
	logPath := filepath.Join(dir, "task_t1_1735787045.jsonl")
	var lost *LockLostError
	if _, err := Open(logPath, WriterOptions{TaskID: testTask, Lock: l, First: taskStart()}, nil); !errors.As(err, &lost) {
		t.Fatalf("Open under a deleted lock = %v, want a *LockLostError", err)
	}
	if _, err := os.Lstat(logPath); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open under a deleted lock made the log (%v)", err)
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := l.Check(); err == nil || errors.As(err, &lost) {
		t.Errorf("Check after Unlock = %v, want an error saying it was released", err)
	}
}

// TestLockRefusesPlantedFiles: LockTask never writes through a link, nor
// into a file it does not own alone, nor blocks on a named pipe; the file
// behind stays as it was, and nobody is reported holding it.
func TestLockRefusesPlantedFiles(t *testing.T) {
	const precious = "precious, not a lock\n"
	tests := []struct {
		name  string
		plant func(t *testing.T, path, target string)
	}{
		{"symbolic link", func(t *testing.T, path, target string) { mustSymlink(t, target, path) }},
		{"dangling symbolic link", func(t *testing.T, path, target string) {
			mustRemove(t, target)
			mustSymlink(t, target, path)
		}},
		{"hard link", func(t *testing.T, path, target string) {
			if err := os.Link(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"named pipe", func(t *testing.T, path, target string) {
			if err := unix.Mkfifo(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"folder", func(t *testing.T, path, target string) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			target := filepath.Join(dir, "precious")
			if err := os.WriteFile(target, []byte(precious), 0o644); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "task_t1.lock")
			tt.plant(t, path, target)
			l, err := LockTask(path)
			var ue *UnsafeFileError
			if !errors.As(err, &ue) || ue.Path != path {
				if l != nil {
					l.Unlock()
				}
				t.Fatalf("LockTask(%s) = %v, want an *UnsafeFileError", tt.name, err)
			}
			if b, err := os.ReadFile(target); err == nil && string(b) != precious {
				t.Errorf("LockTask wrote %q into the file behind the %s", b, tt.name)
			}
			if tt.name == "dangling symbolic link" {
				if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("LockTask created the target of a dangling link (%v)", err)
				}
			}
			if pid, held := Holder(path); held {
				t.Errorf("Holder(%s) = %d, held; want not held", tt.name, pid)
			}
		})
	}
}
