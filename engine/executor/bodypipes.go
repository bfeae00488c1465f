package executor

import (
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// bodyPipes carries a process body's stdout and stderr to the engine through
// two pipes that the attempt's own goroutine reads: on Linux it waits in one
// ppoll(2) on both pipes and on the body's pidfd, so it learns of output and
// of the body's exit in the same blocking call. Two copying goroutines (what
// exec.Cmd or io.Copy would use) cost two goroutine wake-ups per step, on a
// small machine each a wake of another thread: about a fifth of a `true`
// step's time. Where there is no pidfd (macOS, Linux before 5.3) it polls the
// pipes with a timeout and checks for the exit between polls.
type bodyPipes struct {
	// r holds the read ends, stdout then stderr; -1 once closed.
	r [2]int
	// w holds the write ends, for the child; nil once closed.
	w [2]*os.File
	// to receives what each pipe carries.
	to  [2]io.Writer
	buf []byte
	// portablePoll has poll wait in pollMillis rather than in this
	// system's waitFds: tests set it to run macOS's wait on Linux too. (A
	// func field would be simpler, but the pollfds handed to it through an
	// unknown call would escape to the heap, an allocation per poll.)
	portablePoll bool
}

// bodyPollEvery is how often the body's exit is checked for when the system
// gives no pidfd (macOS, Linux before 5.3).
const bodyPollEvery = 10 * time.Millisecond

// openBodyPipes makes the pipes; stdout's output goes to stdout and
// stderr's to stderr.
func openBodyPipes(stdout, stderr io.Writer) (*bodyPipes, error) {
	p := &bodyPipes{r: [2]int{-1, -1}, to: [2]io.Writer{stdout, stderr}}
	for i := range p.r {
		var fds [2]int
		if err := pipe(&fds); err != nil {
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
			unix.Close(fd)
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

// poll waits up to timeout (forever when negative) for output, an end of
// a pipe or, when watch ≥ 0, for watch (a pidfd) to become readable,
// copies the output that is ready and closes the pipes that ended. It
// reports whether watch became readable, and the poll's error unless it
// was interrupted by a signal (the caller polls again).
func (p *bodyPipes) poll(watch int, timeout time.Duration) (watched bool, err error) {
	// A closed pipe (fd -1) is left out by the kernel, as is a missing
	// pidfd.
	fds := [3]unix.PollFd{
		{Fd: int32(p.r[0]), Events: unix.POLLIN},
		{Fd: int32(p.r[1]), Events: unix.POLLIN},
		{Fd: int32(watch), Events: unix.POLLIN},
	}
	if p.portablePoll {
		err = pollMillis(fds[:], timeout)
	} else {
		err = waitFds(fds[:], timeout)
	}
	if err == unix.EINTR {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for i := range p.r {
		if fds[i].Revents != 0 {
			p.read(i)
		}
	}
	return watch >= 0 && fds[2].Revents != 0, nil
}

// pollMillis is poll(2) with its timeout rounded up to a millisecond, so
// that a short wait does not become a busy loop: the wait of systems
// without ppoll(2), and run on Linux by the tests.
func pollMillis(fds []unix.PollFd, timeout time.Duration) error {
	ms := -1
	if timeout >= 0 {
		ms = int(min((timeout+time.Millisecond-1)/time.Millisecond, 1<<31-1))
	}
	_, err := unix.Poll(fds, ms)
	return err
}

// Reads start with a small buffer and grow to a pipe's capacity once a read
// fills it: most steps print little or nothing, and a 64 KB buffer for each
// would be most of what a `true` step allocates, and what makes the
// collector run.
const (
	firstReadBuf = 2 << 10
	fullReadBuf  = 64 << 10
)

// read copies one read's worth from pipe i, closing it at its end.
func (p *bodyPipes) read(i int) {
	if p.buf == nil {
		p.buf = make([]byte, firstReadBuf)
	}
	n, err := unix.Read(p.r[i], p.buf)
	if n > 0 {
		// A write error (a full disk) must not stop the reading: the body
		// would block on a full pipe. The output file notes what it lost.
		p.to[i].Write(p.buf[:n])
		if n == len(p.buf) && n < fullReadBuf {
			p.buf = make([]byte, fullReadBuf)
		}
		return
	}
	if err == unix.EINTR || err == unix.EAGAIN {
		return
	}
	unix.Close(p.r[i])
	p.r[i] = -1
}
