package luaproc

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
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
// durable when call returns.
type Handler func(ctx context.Context, job []byte, call func(req []byte) ([]byte, error)) ([]byte, error)

// frame is one frame read from the other side.
type frame struct {
	kind byte
	body []byte
}

// server is the child's side of the protocol.
type server struct {
	out  io.Writer
	wmu  sync.Mutex // one frame at a time on out
	in   chan frame // frames from the parent; closed at the end of its stream
	mem  meterConfig
	lim  limits        // the Go memory limit and RLIMIT_DATA, kept between jobs
	gone chan struct{} // closed when the parent's stream ends

	mu         sync.Mutex
	cancel     context.CancelCauseFunc // the running job's, or nil
	callerDone chan struct{}           // closed when the running job's handler returned
}

// Serve is the child's side: it says hello on stdout, then runs the jobs
// the parent sends on stdin one at a time, each under its memory limit (see
// the package documentation), until the parent closes stdin, ctx ends (the
// child's SIGTERM), or a job leaves the process unfit for another (over its
// limit, or grown). It returns nil then, and the process should exit. A
// child whose parent is gone and whose job does not stop within 5 s exits
// at once (os.Exit(1)).
func Serve(ctx context.Context, stdin io.Reader, stdout io.Writer, h Handler) error {
	return serve(ctx, stdin, stdout, h, defaultMeter)
}

func serve(ctx context.Context, stdin io.Reader, stdout io.Writer, h Handler, mem meterConfig) error {
	s := &server{out: stdout, in: make(chan frame), mem: mem, lim: limits{cfg: mem}, gone: make(chan struct{})}
	if err := s.write(kindHello, []byte(version)); err != nil {
		return fmt.Errorf("luaproc: say hello: %w", err)
	}
	readErr := make(chan error, 1)
	go func() { readErr <- s.read(bufio.NewReader(stdin)) }()
	fresh := goMemory()
	for {
		var f frame
		select {
		case <-ctx.Done():
			return nil
		case got, ok := <-s.in:
			if !ok {
				if err := <-readErr; err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("luaproc: read from the parent: %w", err)
				}
				return nil
			}
			f = got
		}
		if f.kind != kindJob || len(f.body) < jobHeaderLen {
			return fmt.Errorf("%w: %q where a job was expected", errFrame, f.kind)
		}
		limit := binary.BigEndian.Uint64(f.body[:jobHeaderLen])
		retire, err := s.job(ctx, limit, f.body[jobHeaderLen:], h, fresh)
		if err != nil || retire {
			return err
		}
	}
}

// read passes the parent's frames to s.in; at the end of the stream it
// closes s.in and stops the running job, if any, as nobody waits for it.
func (s *server) read(r *bufio.Reader) error {
	defer close(s.in)
	for {
		kind, body, err := readFrame(r)
		if err != nil {
			close(s.gone)
			s.orphaned()
			return err
		}
		s.in <- frame{kind, body}
	}
}

// orphaned stops the running job of a child whose parent is gone, and ends
// the process if the job does not stop within orphanGrace.
func (s *server) orphaned() {
	s.mu.Lock()
	cancel, done := s.cancel, s.callerDone
	s.mu.Unlock()
	if cancel == nil {
		return
	}
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
// sends its result. It reports whether the child must exit after it.
func (s *server) job(ctx context.Context, limit uint64, job []byte, h Handler, fresh uint64) (retire bool, err error) {
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan struct{})
	defer close(done)
	s.mu.Lock()
	s.cancel, s.callerDone = cancel, done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cancel, s.callerDone = nil, nil
		s.mu.Unlock()
	}()
	select {
	case <-s.gone:
		return true, nil
	default:
	}

	s.lim.set(limit)
	m := s.mem.start(limit, func() { cancel(ErrMemoryLimit) }, nil, nil)
	out, herr := h(jctx, job, func(req []byte) ([]byte, error) { return s.call(jctx, req) })
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
	if over || ctx.Err() != nil || errors.Is(context.Cause(jctx), errParentGone) || goMemory() > fresh+retireGrowth {
		flags |= resultRetired
		retire = true
	}
	if err := s.write(kindResult, []byte{flags}, out); err != nil {
		return true, fmt.Errorf("luaproc: send the result: %w", err)
	}
	return retire, nil
}

// call sends a request and waits for its answer.
func (s *server) call(ctx context.Context, req []byte) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	if err := s.write(kindRequest, req); err != nil {
		return nil, fmt.Errorf("luaproc: send a request: %w", err)
	}
	select {
	case f, ok := <-s.in:
		switch {
		case !ok:
			return nil, errParentGone
		case f.kind != kindAnswer || len(f.body) == 0:
			return nil, fmt.Errorf("%w: %q where an answer was expected", errFrame, f.kind)
		case f.body[0]&answerErr != 0:
			return nil, errors.New(string(f.body[1:]))
		}
		return f.body[1:], nil
	case <-ctx.Done():
		// The answer, if it comes, is read by nobody: the job is over and
		// the child retires (its context ended), so it never reads a job
		// where an answer stands.
		return nil, context.Cause(ctx)
	}
}
