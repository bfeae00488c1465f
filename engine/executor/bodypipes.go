package executor

import (
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// bodyPipes carries a process body's stdout and stderr to the engine through
// two pipes that the attempt's own goroutine reads: it waits in one ppoll(2)
// on both pipes and on the body's pidfd, so it learns of output and of the
// body's exit in the same blocking call. Two copying goroutines (what
// exec.Cmd or io.Copy would use) cost two goroutine wake-ups per step, on a
// small machine each a wake of another thread: about a fifth of a `true`
// step's time.
type bodyPipes struct {
	// r holds the read ends, stdout then stderr; -1 once closed.
	r [2]int
	// w holds the write ends, for the child; nil once closed.
	w [2]*os.File
	// to receives what each pipe carries.
	to  [2]io.Writer
	buf []byte
}

// bodyPollEvery is how often the body's exit is checked for when the kernel
// gives no pidfd (Linux before 5.3).
const bodyPollEvery = 10 * time.Millisecond

// openBodyPipes makes the pipes; stdout's output goes to stdout and
// stderr's to stderr.
func openBodyPipes(stdout, stderr io.Writer) (*bodyPipes, error) {
	p := &bodyPipes{r: [2]int{-1, -1}, to: [2]io.Writer{stdout, stderr}}
	for i := range p.r {
		var fds [2]int
		if err := syscall.Pipe2(fds[:], syscall.O_CLOEXEC); err != nil {
			p.close()
			return nil, err
		}
		p.r[i] = fds[0]
		p.w[i] = os.NewFile(uintptr(fds[1]), "|1")
	}
	return p, nil
}

// closeWriters closes the parent's copies of the write ends, once the child
// has its own: the pipes then end when the child's side closes.
func (p *bodyPipes) closeWriters() {
	for i, w := range p.w {
		if w != nil {
			w.Close()
			p.w[i] = nil
		}
	}
}

// close closes every end still open.
func (p *bodyPipes) close() {
	p.closeWriters()
	for i, fd := range p.r {
		if fd >= 0 {
			syscall.Close(fd)
			p.r[i] = -1
		}
	}
}

// untilExit copies output until process pid, whose pidfd is given, exits.
// With no pidfd (pidfd < 0) it checks for the exit every bodyPollEvery.
// Either way the process is not reaped: its exec.Cmd's Wait does that.
func (p *bodyPipes) untilExit(pid, pidfd int) {
	timeout := time.Duration(-1)
	if pidfd < 0 {
		timeout = bodyPollEvery
	}
	for {
		watched, err := p.poll(pidfd, timeout)
		if watched {
			return
		}
		if err != nil {
			// Not a signal: ppoll itself failed (out of memory). Fall back
			// to checking, rather than spin on the error.
			time.Sleep(bodyPollEvery)
		}
		if (pidfd < 0 || err != nil) && exited(pid) {
			return
		}
	}
}

// drain copies what is left in the pipes until both are closed by every
// process holding them, or until deadline: a process that left the body's
// group may hold them for as long as it lives.
func (p *bodyPipes) drain(deadline time.Time) {
	for p.r[0] >= 0 || p.r[1] >= 0 {
		left := time.Until(deadline)
		if left <= 0 {
			return
		}
		if _, err := p.poll(-1, left); err != nil {
			time.Sleep(min(left, bodyPollEvery)) // as in untilExit
		}
	}
}

// pollFd is struct pollfd of poll(2).
type pollFd struct {
	fd      int32
	events  int16
	revents int16
}

const pollIn = 0x1

// poll waits up to timeout (forever when negative) for output, an end of
// a pipe or, when watch ≥ 0, for watch (a pidfd) to become readable,
// copies the output that is ready and closes the pipes that ended. It
// reports whether watch became readable, and ppoll's error unless it was
// interrupted by a signal (the caller polls again).
func (p *bodyPipes) poll(watch int, timeout time.Duration) (watched bool, err error) {
	var fds [3]pollFd
	for i, fd := range p.r {
		// A closed pipe is left out by the kernel (negative fd).
		fds[i] = pollFd{fd: int32(fd), events: pollIn}
	}
	fds[2] = pollFd{fd: int32(watch), events: pollIn}
	var ts *syscall.Timespec
	if timeout >= 0 {
		t := syscall.NsecToTimespec(int64(timeout))
		ts = &t
	}
	_, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)),
		uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if errno == syscall.EINTR {
		return false, nil
	}
	if errno != 0 {
		return false, errno
	}
	for i := range p.r {
		if fds[i].revents != 0 {
			p.read(i)
		}
	}
	return watch >= 0 && fds[2].revents != 0, nil
}

// read copies one read's worth from pipe i, closing it at its end.
func (p *bodyPipes) read(i int) {
	if p.buf == nil {
		p.buf = make([]byte, 64<<10)
	}
	n, err := syscall.Read(p.r[i], p.buf)
	if n > 0 {
		// A write error (a full disk) must not stop the reading: the body
		// would block on a full pipe. The output file notes what it lost.
		p.to[i].Write(p.buf[:n])
		return
	}
	if err == syscall.EINTR || err == syscall.EAGAIN {
		return
	}
	syscall.Close(p.r[i])
	p.r[i] = -1
}

// exited reports whether process pid has exited, without reaping it.
func exited(pid int) bool {
	const pPID, wExited, wNoHang, wNoWait = 1, 0x4, 0x1, 0x1000000
	var info [128]byte // siginfo_t; si_pid stays 0 unless a child has exited
	_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, pPID, uintptr(pid), uintptr(unsafe.Pointer(&info[0])),
		wExited|wNoHang|wNoWait, 0, 0)
	if errno != 0 {
		return errno == syscall.ECHILD // already reaped, or not ours: nothing to wait for
	}
	// si_pid follows si_signo, si_errno and si_code, aligned for a pointer.
	siPID := (12 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)
	return *(*int32)(unsafe.Pointer(&info[siPID])) != 0
}
