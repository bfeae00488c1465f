package luaproc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// ErrMemoryLimit is the cause of a job's context when the child's memory
// meter stopped it: the job's heap grew past its limit.
var ErrMemoryLimit = errors.New("memory limit exceeded")

// errParentGone is the cause of a job's context when the parent closed the
// child's standard input: nobody is waiting for the result.
var errParentGone = errors.New("luaproc: the parent process is gone")

// orphanGrace is how long a child whose parent is gone waits for its job to
// stop before it exits anyway (a handler stuck in a call that ignores its
// context).
const orphanGrace = 5 * time.Second

// Handler runs one job in the child and returns its result. ctx ends when
// the parent stops the job (SIGTERM reaches Serve's context), when the
// memory meter stops it (cause ErrMemoryLimit) or when the parent is gone.
// call sends a request to the parent and returns its answer (an error the
// parent's onRequest returned comes back as an error with its message); it
// waits for the answer, so a request the parent must make durable is
// durable when call returns. call(nil) waits for a held job's go-ahead
// (Pool.RunSent) and returns its refusal as an error; for a job that is not
// held, or once it was read, it returns at once. A request of a held job
// waits for the go-ahead first. A handler that returns without it sends
// its result at once, and the go-ahead, if the parent still sends one, is
// dropped.
type Handler func(ctx context.Context, job []byte, call func(req []byte) ([]byte, error)) ([]byte, error)

// server is the child's side of the protocol. The goroutine that reads a
// job from the pipe runs it: nothing hands a frame from one goroutine to
// another, which would wake a second thread for every job.
type server struct {
	in  *os.File // the parent's stream, pollable (a read deadline stops a read)
	fd  int      // in's descriptor, for the meter's look at the pipe
	r   *bufio.Reader
	out io.Writer
	wmu sync.Mutex // one frame at a time on out
	cmu sync.Mutex // one request at a time
	mem meterConfig
	lim limits // the Go memory limit and RLIMIT_DATA, kept between jobs
	// procs is how many Ps a job gets once it has run for wideAfter,
	// GOMAXPROCS being 1 otherwise (0: GOMAXPROCS is left alone).
	procs     int
	wideAfter time.Duration
}

// Serve is the child's side: it says hello on stdout, then runs the jobs
// the parent sends on stdin one at a time, each under its memory limit (see
// the package documentation), until the parent closes stdin, ctx ends (the
// child's SIGTERM), or a job leaves the process unfit for another (over its
// limit, or grown). It returns nil then, and the process should exit. A
// child whose parent is gone and whose job does not stop within 5 s exits
// at once (os.Exit(1)). stdin is read on the goroutine that calls Serve,
// which runs the handler too.
func Serve(ctx context.Context, stdin *os.File, stdout io.Writer, h Handler) error {
	return serve(ctx, stdin, stdout, h, defaultMeter, singleP(), wideAfter)
}

// singleP gives the child's Go runtime one P and returns how many it had:
// one job runs at a time, on one goroutine, and between jobs and in a short
// one a second P only adds threads that spin, sleep and wake around every
// frame (measured in docs/performance.md, "Lua steps"). A job that runs
// longer gets them back (server.widen). It is set here, not in the child's
// environment, which the commands a job starts inherit.
func singleP() int { return runtime.GOMAXPROCS(1) }

// wideAfter is how long a job runs on one P before the runtime gets the
// child's Ps back: a job that allocates then has the collector's workers
// on another core rather than between its own instructions.
const wideAfter = 2 * time.Millisecond

// serve is Serve with the memory meter mem; procs is how many Ps a job
// that runs longer than wide gets (0: GOMAXPROCS is not touched).
func serve(ctx context.Context, stdin *os.File, stdout io.Writer, h Handler, mem meterConfig, procs int, wide time.Duration) error {
	in, fd, err := pollable(stdin)
	if err != nil {
		return fmt.Errorf("luaproc: read from the parent: %w", err)
	}
	s := &server{in: in, fd: fd, r: bufio.NewReader(in), out: stdout, mem: mem, lim: limits{cfg: mem}, procs: procs, wideAfter: wide}
	if err := s.write(kindHello, []byte(version)); err != nil {
		return fmt.Errorf("luaproc: say hello: %w", err)
	}
	// The child's SIGTERM between jobs stops the read of the next one.
	defer context.AfterFunc(ctx, s.interrupt)()
	fresh := goMemory()
	late := false // the last job's go-ahead may still come
	for {
		kind, body, err := readFrame(s.r)
		switch {
		case ctx.Err() != nil || errors.Is(err, io.EOF):
			return nil
		case err != nil:
			return fmt.Errorf("luaproc: read from the parent: %w", err)
		case kind == kindAnswer && late:
			late = false // the job it was for is over
			continue
		case kind != kindJob || len(body) < jobHeaderLen:
			return fmt.Errorf("%w: %q where a job was expected", errFrame, kind)
		}
		limit := binary.BigEndian.Uint64(body[:8])
		held := body[8]&jobHeld != 0
		var retire bool
		retire, late, err = s.job(ctx, limit, held, body[jobHeaderLen:], h, fresh)
		if err != nil || retire {
			return err
		}
	}
}

// pollable returns f, or a descriptor of the same pipe that the runtime's
// poller watches (os.Stdin is a blocking file), so that a read deadline
// stops a read; and its descriptor.
func pollable(f *os.File) (*os.File, int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, 0, err
	}
	if f.SetReadDeadline(time.Time{}) == nil {
		fd := -1
		rc.Control(func(d uintptr) { fd = int(d) })
		return f, fd, nil
	}
	fd := -1
	var derr error
	if err := rc.Control(func(d uintptr) { fd, derr = unix.FcntlInt(d, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return nil, 0, err
	}
	if derr != nil {
		return nil, 0, derr
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, 0, err
	}
	return os.NewFile(uintptr(fd), f.Name()), fd, nil
}

// interrupt stops the read of the parent's stream under way, and any
// later one: the child is ending.
func (s *server) interrupt() { s.in.SetReadDeadline(time.Unix(1, 0)) }

// parentGone reports, without reading, whether the parent closed its end
// of the stream: the meter asks while a job runs and nothing reads it.
func (s *server) parentGone() bool {
	return pollNow(s.fd)&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
}

// pollNow asks, without waiting, what the pipe fd has for a reader (poll(2)
// for POLLIN): its revents, 0 for nothing.
func pollNow(fd int) int16 {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds, 0); err != nil || n == 0 {
		return 0
	}
	return fds[0].Revents
}

// orphaned stops the job of a child whose parent is gone (cancel), and
// ends the process if the job does not stop within orphanGrace (done is
// closed when its handler returned).
func orphaned(cancel context.CancelCauseFunc, done <-chan struct{}) {
	cancel(errParentGone)
	go func() {
		select {
		case <-done:
		case <-time.After(orphanGrace):
			os.Exit(1)
		}
	}()
}

// write sends one frame to the parent.
func (s *server) write(kind byte, parts ...[]byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return writeFrame(s.out, kind, parts...)
}

// job runs one job under its memory limit (limit bytes; 0 for none) and
// sends its result. It reports whether the child must exit after it, and
// whether the job was held and its go-ahead not read: the parent may still
// send it, after the result, or not at all.
func (s *server) job(ctx context.Context, limit uint64, held bool, job []byte, h Handler, fresh uint64) (retire, late bool, err error) {
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)

	s.lim.set(limit)
	narrow := s.widen()
	defer narrow()
	m := s.mem.start(limit, func() { cancel(ErrMemoryLimit) }, s.parentGone, func() { orphaned(cancel, done) })
	waiting := held // the go-ahead is still to be read
	var refused error
	goAhead := func() error {
		if waiting {
			waiting = false
			_, refused = s.answer(jctx, cancel, done)
		}
		return refused
	}
	out, herr := h(jctx, job, func(req []byte) ([]byte, error) {
		if err := goAhead(); req == nil || err != nil {
			// A request comes after the go-ahead, which is read
			// first: it is the next frame on the pipe.
			return nil, err
		}
		return s.call(jctx, req, cancel, done)
	})
	over := m.stop()

	var flags byte
	if herr != nil {
		flags |= resultErr
		out = []byte(herr.Error())
	}
	if over {
		flags |= resultLimit
	}
	// A child that went over its limit, was stopped, lost its parent or
	// kept much of what its job allocated is not given another job: its
	// heap is not what the next job's limit assumes.
	if over || ctx.Err() != nil || lost(refused) || errors.Is(context.Cause(jctx), errParentGone) || goMemory() > fresh+retireGrowth {
		flags |= resultRetired
		retire = true
	}
	if err := s.write(kindResult, []byte{flags}, out); err != nil {
		return true, false, fmt.Errorf("luaproc: send the result: %w", err)
	}
	return retire, waiting, nil
}

// lost reports whether err, from reading a go-ahead, leaves the stream
// unfit for another job (a refusal does not).
func lost(err error) bool {
	return errors.Is(err, errParentGone) || errors.Is(err, errFrame) || errors.Is(err, context.Canceled) || errors.Is(err, ErrMemoryLimit)
}

// widen gives the runtime s.procs Ps once the job has run for s.wideAfter,
// and returns what gives it one again after the job. A job shorter than
// that sets a timer and stops it, and wakes nothing.
func (s *server) widen() (narrow func()) {
	if s.procs <= 1 {
		return func() {}
	}
	var mu sync.Mutex
	wide, over := false, false
	t := time.AfterFunc(s.wideAfter, func() {
		mu.Lock()
		defer mu.Unlock()
		if !over {
			runtime.GOMAXPROCS(s.procs)
			wide = true
		}
	})
	return func() {
		t.Stop()
		mu.Lock()
		defer mu.Unlock()
		over = true
		if wide {
			runtime.GOMAXPROCS(1)
		}
	}
}

// call sends a request and reads its answer; cancel and done are the job's
// (see orphaned). A job whose context ends while it waits stops waiting:
// the child retires after it, so it never reads a job where an answer
// stands.
func (s *server) call(ctx context.Context, req []byte, cancel context.CancelCauseFunc, done <-chan struct{}) ([]byte, error) {
	s.cmu.Lock()
	defer s.cmu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	if err := s.write(kindRequest, req); err != nil {
		return nil, fmt.Errorf("luaproc: send a request: %w", err)
	}
	return s.answer(ctx, cancel, done)
}

// answer reads the answer to a request, or a held job's go-ahead.
func (s *server) answer(ctx context.Context, cancel context.CancelCauseFunc, done <-chan struct{}) ([]byte, error) {
	stop := context.AfterFunc(ctx, s.interrupt)
	kind, body, err := readFrame(s.r)
	stop()
	switch {
	case ctx.Err() != nil:
		return nil, context.Cause(ctx)
	case err != nil:
		orphaned(cancel, done)
		return nil, errParentGone
	case kind != kindAnswer || len(body) == 0:
		return nil, fmt.Errorf("%w: %q where an answer was expected", errFrame, kind)
	case body[0]&answerErr != 0:
		return nil, errors.New(string(body[1:]))
	}
	return body[1:], nil
}
