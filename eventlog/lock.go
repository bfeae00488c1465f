package eventlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

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

// LockLostError says the task lock this process holds is no longer the file
// at the lock's path: someone deleted or replaced it while the task ran, so
// another process may have locked the new file and be running the task too.
// A Writer given the lock (WriterOptions.Lock) returns it from every append
// once it happens, and writes nothing more, so that two runners never write
// one log.
type LockLostError struct {
	Path string
	// Err is why the path names no file, fs.ErrNotExist when the lock file
	// was deleted; nil when another file took its place.
	Err error
}

func (e *LockLostError) Error() string {
	how := "replaced by another file"
	switch {
	case errors.Is(e.Err, fs.ErrNotExist):
		how = "deleted"
	case e.Err != nil:
		how = fmt.Sprintf("made unreadable (%v)", e.Err)
	}
	return fmt.Sprintf("task lock %s was %s while this process held it: another process may be running the task, "+
		"so this one writes nothing more to its log", e.Path, how)
}

func (e *LockLostError) Unwrap() error { return e.Err }

// TaskLock is the runner's exclusive hold on a task: a flock on the lock
// file, which the kernel releases when the process dies, so a killed runner
// never leaves a stale lock.
//
// A flock holds an open file, not a name: a lock file deleted or replaced
// while held leaves the holder locking a file nobody else can find, and the
// next runner creates and locks a new one. So the lock remembers which file
// it holds (device and inode), LockTask makes sure that file is the one at
// the path once it holds it, and Check tells whether it still is.
type TaskLock struct {
	path     string
	f        *os.File
	dev, ino uint64
	released atomic.Bool
}

// LockTask takes the task lock at path without waiting (beyond a brief
// retry, so that a concurrent inspect probing the lock does not turn a start
// into a refusal) and writes this process's pid into it. It never follows a
// symbolic link at path and refuses anything but a regular file with one
// link (an *UnsafeFileError), so a link planted there cannot make it write
// to another file; and it locks only the file that path names once the lock
// is held, so a lock file deleted or replaced meanwhile is not mistaken for
// the task's.
func LockTask(path string) (*TaskLock, error) {
	deadline := time.Now().Add(150 * time.Millisecond)
	for {
		l, busy, err := tryLockTask(path)
		if err != nil {
			return nil, err
		}
		if l != nil {
			if err := l.writePID(); err != nil {
				l.Unlock()
				return nil, fmt.Errorf("lock task: write pid: %w", err)
			}
			return l, nil
		}
		if time.Now().After(deadline) {
			if errors.Is(busy, errLockMoved) {
				return nil, fmt.Errorf("lock task: %s: %w", path, busy)
			}
			return nil, &LockedError{Path: path, PID: readPID(path)}
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// errLockMoved: the lock file was deleted or replaced between its open and
// its flock.
var errLockMoved = errors.New("the lock file was deleted or replaced by another while being locked")

// tryLockTask makes one attempt at the lock. It returns the lock, or why it
// is busy (another holder, or errLockMoved), or an error that retrying does
// not cure.
func tryLockTask(path string) (l *TaskLock, busy, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
	if err != nil {
		if ue := unsafeAt(OS{}, path, err); ue != nil {
			return nil, nil, ue
		}
		return nil, nil, fmt.Errorf("lock task: %w", err)
	}
	fd := int(f.Fd())
	st, err := fstat(fd)
	if err == nil {
		err = regular(path, st)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if err := flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, err, nil
		}
		return nil, nil, fmt.Errorf("lock task %s: %w", path, err)
	}
	// Held. Whoever deleted or replaced the file since the open locks (or
	// already locked) the file the path names now: start over with it.
	if now, err := lstat(path); err != nil || !sameFile(now, st) {
		f.Close()
		return nil, errLockMoved, nil
	}
	if st, err = fstat(fd); err == nil && st.Nlink != 1 {
		// A hard link planted at the path would have the pid written
		// into the file it shares.
		err = &UnsafeFileError{Path: path, Reason: fmt.Sprintf("it has %d hard links, and a lock file has one", st.Nlink)}
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return &TaskLock{path: path, f: f, dev: uint64(st.Dev), ino: uint64(st.Ino)}, nil, nil
}

// writePID writes this process's pid into the locked file, through the
// locked descriptor (never by name).
func (l *TaskLock) writePID() error {
	if err := l.f.Truncate(0); err != nil {
		return err
	}
	_, err := l.f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return err
}

// Path is the lock file's name.
func (l *TaskLock) Path() string { return l.path }

// Check reports whether the lock is still the file at its path: nil if so,
// a *LockLostError if the file was deleted or another took its place. It
// costs one lstat(2).
func (l *TaskLock) Check() error {
	if l.released.Load() {
		return fmt.Errorf("task lock %s: %w", l.path, os.ErrClosed)
	}
	var st unix.Stat_t // on the stack: Check runs before every append
	if err := lstatInto(l.path, &st); err != nil {
		return &LockLostError{Path: l.path, Err: err}
	}
	if uint64(st.Dev) != l.dev || uint64(st.Ino) != l.ino {
		return &LockLostError{Path: l.path}
	}
	return nil
}

// Unlock releases the lock. The file stays: removing it would let a runner
// that opened it just before lock a file nobody else can find.
func (l *TaskLock) Unlock() error {
	if l.released.Swap(true) {
		return nil
	}
	err := flock(int(l.f.Fd()), unix.LOCK_UN)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readPID reads the pid a holder wrote into the lock file at path, 0 if
// there is none. It never follows a link, nor opens anything but a regular
// file (a named pipe would block it).
func readPID(path string) int {
	for range 5 {
		if pid := readPIDOnce(path); pid > 0 {
			return pid
		}
		time.Sleep(5 * time.Millisecond) // the holder may be writing it
	}
	return 0
}

func readPIDOnce(path string) int {
	f, err := OpenRegular(path, false)
	if err != nil {
		return 0
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 32))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// Holder reports whether a process holds the task lock at path, and its pid,
// without taking the lock where it can: on Linux it reads /proc/locks, so it
// can never make a starting runner fail. Elsewhere, or without /proc, it
// falls back to a brief try-lock (shared, so probes do not exclude each
// other). A path that is not a regular file is never held.
func Holder(path string) (pid int, held bool) {
	st, err := lstat(path)
	if err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
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
	f, err := OpenRegular(path, false)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	if err := flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return readPID(path), true
		}
		return 0, false
	}
	_ = flock(int(f.Fd()), unix.LOCK_UN)
	return 0, false
}

// flock applies a flock(2) operation to fd, retrying when a signal
// interrupts it.
func flock(fd, how int) error {
	return ignoringEINTR(func() error { return unix.Flock(fd, how) })
}

func fstat(fd int) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := ignoringEINTR(func() error { return unix.Fstat(fd, &st) }); err != nil {
		return nil, err
	}
	return &st, nil
}

func lstat(path string) (*unix.Stat_t, error) {
	st := new(unix.Stat_t)
	if err := lstatInto(path, st); err != nil {
		return nil, err
	}
	return st, nil
}

func lstatInto(path string, st *unix.Stat_t) error {
	for {
		err := unix.Lstat(path, st)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EINTR) {
			return &fs.PathError{Op: "lstat", Path: path, Err: err}
		}
	}
}

func sameFile(a, b *unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
