package luaproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Options configure a Pool.
type Options struct {
	// Path and Args start a child: exec.Command(Path, Args...), a program
	// whose main calls Serve.
	Path string
	Args []string
	// Env is the children's environment; nil means the parent's.
	Env []string
	// Dir is the children's working directory; "" means the parent's.
	Dir string
	// MaxIdle is the most idle children the pool keeps. 0 means as many as
	// were ever busy at once, which the caller's own parallelism bounds; a
	// negative value keeps none and starts none ahead: every job gets a
	// fresh child, which exits after it.
	MaxIdle int
	// IdleTimeout ends a child left idle that long (default 2 s).
	IdleTimeout time.Duration
	// StartTimeout bounds a child's start, until its hello (default 30 s).
	StartTimeout time.Duration
}

// Limits bound one job.
type Limits struct {
	// MemoryMB is the job's memory limit in MiB; 0 means none.
	MemoryMB int
	// KillGrace is the time between SIGTERM and SIGKILL when the job's
	// context ends (default 5 s).
	KillGrace time.Duration
}

// MemoryError is the error of a job its child's memory limit stopped: the
// meter in the child, or the kernel (the child died out of memory).
type MemoryError struct {
	MemoryMB int
	// Died says the child died of it, rather than stopping the job.
	Died bool
}

func (e *MemoryError) Error() string {
	return fmt.Sprintf("memory limit exceeded (memory_mb %d)", e.MemoryMB)
}

// Is makes a *MemoryError match ErrMemoryLimit.
func (e *MemoryError) Is(target error) bool { return target == ErrMemoryLimit }

// ExitError is the error of a job whose child died of something other
// than its memory limit, or could not be spoken to.
type ExitError struct {
	// Status says how the child ended ("exit status 2", "signal: killed").
	Status string
	// Stderr is the start of what the child wrote to its standard error
	// during the job.
	Stderr string
}

func (e *ExitError) Error() string {
	msg := "the Lua process died (" + e.Status + ")"
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// HandlerError is the error the child's handler returned.
type HandlerError struct{ Msg string }

func (e *HandlerError) Error() string { return e.Msg }

// Pool runs jobs in pre-started child processes, one job per child at a
// time. The zero value is not usable; use New. A Pool is safe for
// concurrent use.
type Pool struct {
	opts Options

	mu      sync.Mutex
	idle    []*child
	busy    int
	most    int // the most children busy at once
	closed  bool
	spares  int // children being started ahead (Warm) or to replace ones that left
	waiting int // jobs waiting for one of them
	// spared is closed, and replaced, when a spare's start ended.
	spared  chan struct{}
	started atomic.Int64
}

// New returns a pool that starts children on demand.
func New(opts Options) *Pool {
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Second
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 30 * time.Second
	}
	return &Pool{opts: opts, spared: make(chan struct{})}
}

// Started returns how many children the pool has started.
func (p *Pool) Started() int64 { return p.started.Load() }

// child is one child process. Its stream is read on the goroutine that
// uses it (Run's, or the one ending it): no reading goroutine hands its
// frames to another, which would wake a second thread for every frame.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *os.File      // its stdout, pollable: a read deadline stops a read
	r      *bufio.Reader // on out
	exited chan struct{} // closed once it was waited for
	err    error         // how it ended; set before exited is closed
	stderr *headBuffer
	timer  *time.Timer // the idle timeout, while idle
}

// start starts a child and waits for its hello.
func (p *Pool) start(ctx context.Context) (*child, error) {
	cmd := exec.Command(p.opts.Path, p.opts.Args...)
	cmd.Env = p.opts.Env
	cmd.Dir = p.opts.Dir
	// Its own process group: a terminal's ^C reaches the parent, which
	// decides, and the child and what it runs are ended as one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	// Its stdout is a pipe of our own, not StdoutPipe: Wait would close
	// StdoutPipe's, and the child is waited for while its stream is read.
	out, w, err := os.Pipe()
	if err != nil {
		stdin.Close()
		return nil, err
	}
	cmd.Stdout = w
	c := &child{cmd: cmd, stdin: stdin, out: out, r: bufio.NewReader(out), exited: make(chan struct{}), stderr: &headBuffer{max: 4 << 10}}
	cmd.Stderr = c.stderr
	// Wait returns this long after the child exits even if something it
	// started still holds its standard error.
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	w.Close()
	if err != nil {
		out.Close()
		return nil, fmt.Errorf("luaproc: start %s: %w", p.opts.Path, err)
	}
	p.started.Add(1)
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	out.SetReadDeadline(time.Now().Add(p.opts.StartTimeout))
	disarm := c.watch(ctx)
	kind, body, err := readFrame(c.r)
	disarm()
	switch {
	case err == nil && kind == kindHello && string(body) == version:
		return c, nil
	case ctx.Err() != nil:
		c.kill()
		return nil, context.Cause(ctx)
	case errors.Is(err, os.ErrDeadlineExceeded):
		c.kill()
		return nil, fmt.Errorf("luaproc: %s did not start within %s", p.opts.Path, p.opts.StartTimeout)
	case err != nil:
		c.kill()
		return nil, fmt.Errorf("luaproc: %s did not start: %w", p.opts.Path, c.exitError())
	}
	c.kill()
	return nil, fmt.Errorf("luaproc: %s does not speak %q", p.opts.Path, version)
}

// watch makes the end of ctx stop a read of the child's stream (a read
// deadline in the past). disarm undoes it, and clears the stream's
// deadline: once it has returned, the end of ctx no longer touches the
// child, which may serve another job.
func (c *child) watch(ctx context.Context) (disarm func()) {
	var mu sync.Mutex
	over := false
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !over {
			c.out.SetReadDeadline(time.Unix(1, 0))
		}
	})
	return func() {
		if stop() {
			c.out.SetReadDeadline(time.Time{})
			return
		}
		mu.Lock()
		over = true
		mu.Unlock()
		c.out.SetReadDeadline(time.Time{})
	}
}

// answered reports whether the child's stream has something to read (its
// result, or its end), without reading it.
func (c *child) answered() bool {
	if c.r.Buffered() > 0 {
		return true
	}
	rc, err := c.out.SyscallConn()
	if err != nil {
		return false
	}
	ready := false
	rc.Control(func(fd uintptr) { ready = pollNow(int(fd)) != 0 })
	return ready
}

// signal sends sig to the child's process group.
func (c *child) signal(sig syscall.Signal) {
	if pid := c.cmd.Process.Pid; pid > 0 {
		syscall.Kill(-pid, sig)
	}
}

// kill ends the child's group at once and waits for the child.
func (c *child) kill() {
	c.signal(syscall.SIGKILL)
	c.drain()
}

// drain reads what the child still sends until its stream ends, and waits
// for it to exit.
func (c *child) drain() {
	c.out.SetReadDeadline(time.Time{})
	io.Copy(io.Discard, c.out)
	c.out.Close()
	<-c.exited
}

// stop ends a child whose job's context ended: SIGTERM to its group (the
// child stops its job and exits), then SIGKILL after grace.
func (c *child) stop(grace time.Duration) {
	c.signal(syscall.SIGTERM)
	t := time.AfterFunc(grace, func() { c.signal(syscall.SIGKILL) })
	c.drain()
	t.Stop()
	// The group once more: what the child started in it does not outlive it.
	c.signal(syscall.SIGKILL)
}

// exitError describes how an exited child ended.
func (c *child) exitError() *ExitError {
	<-c.exited
	status := "exit status 0"
	if c.err != nil {
		status = c.err.Error()
	}
	return &ExitError{Status: status, Stderr: c.stderr.firstLines(3)}
}

// diedOfMemory reports whether an exited child died out of memory: the Go
// runtime's fatal errors when the kernel refuses it memory (RLIMIT_DATA),
// the race detector's, or a thread that could not be made (a thread's stack
// is data too: in a cgo binary, pthread_create fails with EAGAIN and
// runtime/cgo aborts). Some of the runtime's own allocations are not
// checked (Go 1.26's collector uses the nil a refused span queue gets, in
// runtime.(*spanQueue).tryDrain): the child then dies of a SIGSEGV at
// address 0 on a system stack ("goroutine 0"), outside any goroutine of
// the program, which only the refused memory explains.
func (c *child) diedOfMemory() bool {
	<-c.exited
	s := c.stderr.String()
	for _, msg := range []string{"out of memory", "cannot allocate memory", "failed to allocate",
		"pthread_create failed", "failed to create new OS thread"} {
		if strings.Contains(s, msg) {
			return true
		}
	}
	return strings.Contains(s, "SIGSEGV: segmentation violation") && faultsAtZero(s) &&
		strings.Contains(s, "goroutine 0 ")
}

// faultsAtZero reports whether the runtime's signal report in s, its line
// "PC=0x… m=N sigcode=N addr=0x…", names address 0.
func faultsAtZero(s string) bool {
	for line := range strings.Lines(s) {
		if !strings.HasPrefix(line, "PC=") {
			continue
		}
		for _, field := range strings.Fields(line) {
			if field == "addr=0x0" {
				return true
			}
		}
	}
	return false
}

// send writes a frame to the child.
func (c *child) send(kind byte, parts ...[]byte) error {
	return writeFrame(c.stdin, kind, parts...)
}

// get returns an idle child, or starts one.
func (p *Pool) get(ctx context.Context) (*child, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("luaproc: the pool is closed")
	}
	p.busy++
	p.most = max(p.most, p.busy)
	// A job finding no idle child waits for a spare being started rather
	// than start one more, as long as there are spares for every job
	// waiting: the spare has been starting for a while already.
	for len(p.idle) == 0 && p.spares > p.waiting {
		p.waiting++
		spared := p.spared
		p.mu.Unlock()
		var err error
		select {
		case <-spared:
		case <-ctx.Done():
			err = context.Cause(ctx)
		}
		p.mu.Lock()
		p.waiting--
		if err != nil {
			p.busy--
			p.mu.Unlock()
			return nil, err
		}
	}
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		c.timer.Stop()
		select {
		case <-c.exited:
			c.out.Close()
			continue // died while idle
		default:
		}
		p.mu.Unlock()
		return c, nil
	}
	p.mu.Unlock()
	c, err := p.start(ctx)
	if err != nil {
		p.mu.Lock()
		p.busy--
		p.mu.Unlock()
		return nil, err
	}
	return c, nil
}

// put returns a child that finished a job and stays.
func (p *Pool) put(c *child) {
	p.mu.Lock()
	p.busy--
	keep := !p.closed && len(p.idle) < p.maxIdle()
	if keep {
		p.idle = append(p.idle, c)
		c.timer = time.AfterFunc(p.opts.IdleTimeout, func() { p.expire(c) })
	}
	p.mu.Unlock()
	if !keep {
		go c.close()
	}
}

// maxIdle is the most idle children kept; p.mu must be held.
func (p *Pool) maxIdle() int {
	switch {
	case p.opts.MaxIdle < 0:
		return 0
	case p.opts.MaxIdle > 0:
		return p.opts.MaxIdle
	}
	return max(p.most, 1)
}

// leave accounts for a child that will not come back, and starts a spare in
// its place, so that the next job does not wait for a start.
func (p *Pool) leave() {
	p.mu.Lock()
	p.busy--
	spare := !p.closed && len(p.idle)+p.spares < p.maxIdle()
	if spare {
		p.spares++
	}
	p.mu.Unlock()
	if spare {
		go p.spare()
	}
}

// Warm starts a child in the background when none is idle or being
// started, so that the first job does not wait for a whole start: a caller
// that will soon run jobs calls it ahead (the engine, when a run has Lua
// steps). It does nothing for a pool that keeps no idle children.
func (p *Pool) Warm() {
	p.mu.Lock()
	spare := !p.closed && len(p.idle)+p.spares == 0 && p.maxIdle() > 0
	if spare {
		p.spares++
	}
	p.mu.Unlock()
	if spare {
		go p.spare()
	}
}

// spare starts a child and makes it idle; p.spares counted it.
func (p *Pool) spare() {
	c, err := p.start(context.Background())
	p.mu.Lock()
	p.spares--
	keep := err == nil && !p.closed && len(p.idle) < max(p.maxIdle(), p.waiting)
	if keep {
		p.idle = append(p.idle, c)
		c.timer = time.AfterFunc(p.opts.IdleTimeout, func() { p.expire(c) })
	}
	close(p.spared)
	p.spared = make(chan struct{})
	p.mu.Unlock()
	if err == nil && !keep {
		c.close()
	}
}

// expire ends an idle child whose idle timeout passed.
func (p *Pool) expire(c *child) {
	p.mu.Lock()
	i := -1
	for j, d := range p.idle {
		if d == c {
			i = j
		}
	}
	if i >= 0 {
		p.idle = append(p.idle[:i], p.idle[i+1:]...)
	}
	p.mu.Unlock()
	if i >= 0 {
		c.close()
	}
}

// close ends a child between jobs: it exits at the end of its stdin (or
// has already decided to); SIGKILL if it has not within 5 s.
func (c *child) close() {
	c.stdin.Close()
	t := time.AfterFunc(5*time.Second, func() { c.signal(syscall.SIGKILL) })
	c.drain()
	t.Stop()
}

// Close ends the idle children and makes the pool refuse new jobs; children
// running a job end when it does.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range idle {
		c.timer.Stop()
		wg.Go(c.close)
	}
	wg.Wait()
	return nil
}

// Run runs job in a child under lim and returns its result. Requests the
// child sends meanwhile are answered by onRequest, one at a time, on Run's
// goroutine; the child waits for each answer. When ctx ends the child's
// process group gets SIGTERM, then SIGKILL after lim.KillGrace, and Run
// returns context.Cause(ctx) once the child is gone. A job stopped by its
// memory limit returns a *MemoryError (with the handler's result, if the
// child sent one); a child that died otherwise an *ExitError; the
// handler's own error a *HandlerError. A child that died, was stopped or
// went over its limit is replaced by a fresh one, started in the
// background.
func (p *Pool) Run(ctx context.Context, job []byte, lim Limits, onRequest func(ctx context.Context, req []byte) ([]byte, error)) ([]byte, error) {
	return p.RunSent(ctx, job, lim, nil, onRequest)
}

// RunSent is Run, calling sent (if not nil) on Run's goroutine once the job
// is sent, and then sending the child its outcome, the job's go-ahead:
// what the parent must do before the job may have effects (make a record
// durable) is done while the child reads the job and runs it up to what
// must wait. The child's handler waits for the go-ahead with call(nil),
// which returns sent's error, if any, as an error with its message. A
// handler that returned without it gets none (unless sent failed): its
// result is already there.
func (p *Pool) RunSent(ctx context.Context, job []byte, lim Limits, sent func() error, onRequest func(ctx context.Context, req []byte) ([]byte, error)) ([]byte, error) {
	if lim.KillGrace <= 0 {
		lim.KillGrace = 5 * time.Second
	}
	if err := ctx.Err(); err != nil {
		return nil, context.Cause(ctx)
	}
	c, err := p.get(ctx)
	if err != nil {
		return nil, err
	}
	c.stderr.reset()
	var head [jobHeaderLen]byte
	binary.BigEndian.PutUint64(head[:8], uint64(max(lim.MemoryMB, 0))<<20)
	if sent != nil {
		head[8] = jobHeld
	}
	err = c.send(kindJob, head[:], job)
	if sent != nil {
		goAhead := []byte{0}
		serr := sent()
		if serr != nil {
			goAhead = append([]byte{answerErr}, serr.Error()...)
		}
		// A child that has answered already did not wait for the
		// go-ahead: it is not sent (the child would read it only to drop
		// it), but a refusal is, for a job still running.
		if err == nil && (serr != nil || !c.answered()) {
			err = c.send(kindAnswer, goAhead)
		}
	}
	if err != nil {
		c.kill()
		p.leave()
		return nil, p.died(c, lim)
	}
	disarm := c.watch(ctx)
	for {
		kind, body, err := readFrame(c.r)
		switch {
		case err != nil && ctx.Err() != nil:
			disarm()
			c.stop(lim.KillGrace)
			p.leave()
			return nil, context.Cause(ctx)
		case err != nil:
			disarm()
			if !errors.Is(err, io.EOF) {
				// A child that writes garbage or cuts a frame is not to be trusted.
				c.kill()
			} else {
				c.drain()
			}
			p.leave()
			return nil, p.died(c, lim)
		case kind == kindRequest:
			ans, rerr := onRequest(ctx, body)
			flag := []byte{0}
			if rerr != nil {
				flag[0], ans = answerErr, []byte(rerr.Error())
			}
			if err := c.send(kindAnswer, flag, ans); err != nil {
				disarm()
				c.kill()
				p.leave()
				return nil, p.died(c, lim)
			}
		case kind == kindResult:
			disarm()
			return p.result(c, body, lim)
		default:
			disarm()
			c.kill()
			p.leave()
			return nil, fmt.Errorf("%w: %q from the child during a job", errFrame, kind)
		}
	}
}

// result takes a result frame's body.
func (p *Pool) result(c *child, body []byte, lim Limits) ([]byte, error) {
	if len(body) == 0 {
		c.kill()
		p.leave()
		return nil, fmt.Errorf("%w: an empty result", errFrame)
	}
	flags, out := body[0], body[1:]
	if flags&resultRetired != 0 {
		go c.close()
		p.leave()
	} else {
		p.put(c)
	}
	switch {
	case flags&resultLimit != 0:
		if flags&resultErr != 0 {
			out = nil
		}
		return out, &MemoryError{MemoryMB: lim.MemoryMB}
	case flags&resultErr != 0:
		return nil, &HandlerError{Msg: string(out)}
	}
	return out, nil
}

// died returns the error of a child that ended during its job.
func (p *Pool) died(c *child, lim Limits) error {
	if lim.MemoryMB > 0 && c.diedOfMemory() {
		return &MemoryError{MemoryMB: lim.MemoryMB, Died: true}
	}
	return c.exitError()
}

// headBuffer keeps the first max bytes written to it.
type headBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if room := h.max - h.buf.Len(); room > 0 {
		h.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (h *headBuffer) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.buf.String()
}

func (h *headBuffer) reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.buf.Reset()
}

// firstLines returns the first n non-empty lines, joined by "; ".
func (h *headBuffer) firstLines(n int) string {
	var lines []string
	for _, l := range strings.Split(h.String(), "\n") {
		if l = strings.TrimSpace(l); l != "" && len(lines) < n {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines, "; ")
}
