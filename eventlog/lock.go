package eventlog

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gofrs/flock"
	"golang.org/x/sys/unix"
)

// LockedError says another process runs the task.
type LockedError struct {
	Path string
	PID  int // 0 if unknown
}

func (e *LockedError) Error() string {
	who := "another apollo process"
	if e.PID > 0 {
		who = fmt.Sprintf("apollo process %d", e.PID)
	}
	return fmt.Sprintf("task is already being run by %s (lock %s); wait for it to end, or stop it", who, e.Path)
}

// TaskLock is the runner's exclusive hold on a task. The kernel releases it
// when the process dies, so a killed runner never leaves a stale lock.
type TaskLock struct {
	fl *flock.Flock
}

// LockTask takes the task lock at path without waiting (beyond a brief
// retry, so that a concurrent inspect probing the lock does not turn a start
// into a refusal) and writes this process's pid into it.
func LockTask(path string) (*TaskLock, error) {
	fl := flock.New(path, flock.SetFlag(os.O_CREATE|os.O_RDWR))
	deadline := time.Now().Add(150 * time.Millisecond)
	for {
		ok, err := fl.TryLock()
		if err != nil {
			return nil, fmt.Errorf("lock task: %w", err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			return nil, &LockedError{Path: path, PID: readPID(path)}
		}
		time.Sleep(10 * time.Millisecond)
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0o644)
	if err == nil {
		_, err = f.Write(pid)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fl.Unlock()
		return nil, fmt.Errorf("lock task: write pid: %w", err)
	}
	return &TaskLock{fl: fl}, nil
}

// Unlock releases the lock.
func (l *TaskLock) Unlock() error {
	return l.fl.Unlock()
}

func readPID(path string) int {
	for i := 0; i < 5; i++ {
		b, err := os.ReadFile(path)
		if err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				return pid
			}
		}
		time.Sleep(5 * time.Millisecond) // the holder may be writing it
	}
	return 0
}

// Holder reports whether a process holds the task lock at path, and its pid,
// without taking the lock where it can: on Linux it reads /proc/locks, so it
// can never make a starting runner fail. Elsewhere, or without /proc, it
// falls back to a brief try-lock.
func Holder(path string) (pid int, held bool) {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Stat(path, &st) }); err != nil {
		return 0, false
	}
	if pid, held, ok := lockHolder(uint64(st.Dev), uint64(st.Ino)); ok {
		if held {
			if p := readPID(path); p > 0 {
				pid = p
			}
		}
		return pid, held
	}
	return probeHolder(path)
}

func probeHolder(path string) (int, bool) {
	fl := flock.New(path, flock.SetFlag(os.O_RDONLY))
	ok, err := fl.TryLock()
	if err != nil {
		return 0, false
	}
	if ok {
		fl.Unlock()
		return 0, false
	}
	return readPID(path), true
}

// flockFD applies a flock(2) operation to fd, retrying when a signal
// interrupts it.
func flockFD(fd, how int) error {
	return ignoringEINTR(func() error { return unix.Flock(fd, how) })
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
