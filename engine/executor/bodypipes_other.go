//go:build !linux

package executor

import (
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// startAttr starts a body in its own process group. There is no pidfd off
// Linux: *pidfd stays -1 and the body's exit is polled for.
func startAttr(pidfd *int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// pipe makes a pipe whose ends close on exec. Without pipe2(2) the ends
// are marked under syscall.ForkLock, as os.Pipe does, so that no child
// started meanwhile inherits them.
func pipe(fds *[2]int) error {
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	if err := unix.Pipe(fds[:]); err != nil {
		return err
	}
	unix.CloseOnExec(fds[0])
	unix.CloseOnExec(fds[1])
	return nil
}

// waitFds is poll(2): there is no ppoll(2) on macOS.
func waitFds(fds []unix.PollFd, timeout time.Duration) error { return pollMillis(fds, timeout) }
