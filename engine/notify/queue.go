package notify

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Target delivers a message: a Webhook or an Email.
type Target interface {
	Send(ctx context.Context, m *Message) error
}

// Permanent marks an error that a retry would not change (a 4xx answer, a
// refused recipient): the queue stops at once.
type Permanent struct{ Err error }

func (e *Permanent) Error() string { return e.Err.Error() }
func (e *Permanent) Unwrap() error { return e.Err }

// Recorder is told how each message ended: sent, or failed after attempts
// tries (err says why). It is called from the queue's goroutines.
type Recorder interface {
	Sent(m *Message, target string, attempts int)
	Failed(m *Message, target string, attempts int, err error)
}

// Options bound a Queue's work.
type Options struct {
	// Attempts is the most tries of one message (default 4).
	Attempts int
	// Backoff is the wait before the second try, doubled for each later
	// one (default 1s).
	Backoff time.Duration
	// Timeout bounds each try (default 10s).
	Timeout time.Duration
	// Parallel bounds the messages sent at once (default 4).
	Parallel int
}

// Queue sends messages in the background. Send never blocks on the
// network; Flush waits, for a bounded time, for what was sent.
type Queue struct {
	opts   Options
	rec    Recorder
	ctx    context.Context
	cancel context.CancelFunc
	slots  chan struct{}

	mu      sync.Mutex
	pending map[string]pendingMsg // by message id and target
	wg      sync.WaitGroup
}

type pendingMsg struct {
	m      *Message
	target string
}

// New returns a queue that tells rec how each message ends.
func New(opts Options, rec Recorder) *Queue {
	if opts.Attempts <= 0 {
		opts.Attempts = 4
	}
	if opts.Backoff <= 0 {
		opts.Backoff = time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Parallel <= 0 {
		opts.Parallel = 4
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Queue{opts: opts, rec: rec, ctx: ctx, cancel: cancel, slots: make(chan struct{}, opts.Parallel),
		pending: map[string]pendingMsg{}}
}

// Send hands m to t in the background; target names t for the Recorder.
func (q *Queue) Send(m *Message, target string, t Target) {
	key := m.ID + "\x00" + target
	q.mu.Lock()
	q.pending[key] = pendingMsg{m, target}
	q.mu.Unlock()
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		n, err := q.deliver(m, t)
		q.mu.Lock()
		_, still := q.pending[key]
		delete(q.pending, key)
		q.mu.Unlock()
		if !still {
			return // Flush gave up on it and recorded it
		}
		if err != nil {
			q.rec.Failed(m, target, n, err)
			return
		}
		q.rec.Sent(m, target, n)
	}()
}

// deliver tries m up to Attempts times, the waits between doubling.
func (q *Queue) deliver(m *Message, t Target) (int, error) {
	select {
	case q.slots <- struct{}{}:
	case <-q.ctx.Done():
		return 0, q.ctx.Err()
	}
	defer func() { <-q.slots }()
	wait := q.opts.Backoff
	var err error
	for n := 1; ; n++ {
		ctx, cancel := context.WithTimeout(q.ctx, q.opts.Timeout)
		err = t.Send(ctx, m)
		cancel()
		if perm := (*Permanent)(nil); err == nil || errors.As(err, &perm) || n >= q.opts.Attempts {
			return n, err
		}
		select {
		case <-time.After(wait):
		case <-q.ctx.Done():
			return n, err
		}
		wait *= 2
	}
}

// Flush waits up to d for every message sent to end. What is still on its
// way then is given up: each is told to the Recorder as failed with
// ErrUnsent, and Flush returns how many there were.
func (q *Queue) Flush(d time.Duration) int {
	done := make(chan struct{})
	go func() { q.wg.Wait(); close(done) }()
	select {
	case <-done:
		return 0
	case <-time.After(d):
	}
	q.mu.Lock()
	left := q.pending
	q.pending = map[string]pendingMsg{}
	q.mu.Unlock()
	q.cancel()
	for _, p := range left {
		q.rec.Failed(p.m, p.target, 0, ErrUnsent)
	}
	<-done // cancelled: every try ends at once
	return len(left)
}

// ErrUnsent is why a message that the end of a run cut off failed.
var ErrUnsent = errors.New("not delivered before the run ended (the wait for notifications ran out)")
