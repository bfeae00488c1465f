package executor

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startAttr starts a body in its own process group and has the kernel
// write the body's pidfd to *pidfd (it stays -1 before Linux 5.3).
func startAttr(pidfd *int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, PidFD: pidfd}
}

// pipe makes a pipe whose ends close on exec.
func pipe(fds *[2]int) error { return unix.Pipe2(fds[:], unix.O_CLOEXEC) }

// waitFds is ppoll(2), whose timeout is in nanoseconds.
func waitFds(fds []unix.PollFd, timeout time.Duration) error {
	var ts *unix.Timespec
	if timeout >= 0 {
		t := unix.NsecToTimespec(int64(timeout))
		ts = &t
	}
	_, err := unix.Ppoll(fds, ts, nil)
	return err
}

// exited reports whether child pid has exited, without reaping it.
func exited(pid int) bool {
	// With WNOHANG the kernel sets si_signo to SIGCHLD when it found an
	// exited child and to 0 when there was none yet.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil {
		return err == unix.ECHILD // already reaped, or not ours: nothing to wait for
	}
	return info.Signo != 0
}
