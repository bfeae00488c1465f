package eventlog

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gofrs/flock"
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
// without taking the lock: it reads /proc/locks, so it can never make a
// starting runner fail. Where /proc/locks is missing it falls back to a
// brief try-lock.
func Holder(path string) (pid int, held bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return probeHolder(path)
	}
	f, err := os.Open("/proc/locks")
	if err != nil {
		return probeHolder(path)
	}
	defer f.Close()
	// Lines look like: "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF",
	// the fourth field being the pid and the fifth major:minor:inode.
	want := ":" + strconv.FormatUint(st.Ino, 10)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[3] != "WRITE" {
			continue
		}
		if !strings.HasSuffix(fields[5], want) {
			continue
		}
		if dev := strings.Split(fields[5], ":"); len(dev) == 3 && !sameDev(dev[0], dev[1], st.Dev) {
			continue
		}
		pid, _ := strconv.Atoi(fields[4])
		if p := readPID(path); p > 0 {
			pid = p
		}
		return pid, true
	}
	return 0, false
}

func sameDev(major, minor string, dev uint64) bool {
	ma, err1 := strconv.ParseUint(major, 16, 32)
	mi, err2 := strconv.ParseUint(minor, 16, 32)
	if err1 != nil || err2 != nil {
		return true // cannot tell: trust the inode
	}
	devMajor := (dev >> 8) & 0xfff
	devMinor := (dev & 0xff) | ((dev >> 12) & 0xfff00)
	return ma == devMajor && mi == devMinor
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
