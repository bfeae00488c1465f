package notify

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// target fails its first fails tries with err, then succeeds; block makes
// every try wait for its context.
type target struct {
	mu    sync.Mutex
	tries int
	fails int
	err   error
	block bool
}

func (t *target) Send(ctx context.Context, m *Message) error {
	t.mu.Lock()
	t.tries++
	n := t.tries
	t.mu.Unlock()
	if t.block {
		<-ctx.Done()
		return ctx.Err()
	}
	if n <= t.fails {
		return t.err
	}
	return nil
}

type outcome struct {
	sent     bool
	attempts int
	err      error
}

type recorder struct {
	mu  sync.Mutex
	got map[string]outcome
}

func (r *recorder) Sent(m *Message, target string, attempts int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[m.ID] = outcome{sent: true, attempts: attempts}
}

func (r *recorder) Failed(m *Message, target string, attempts int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got[m.ID] = outcome{attempts: attempts, err: err}
}

func TestQueueRetriesBounded(t *testing.T) {
	tests := []struct {
		name     string
		t        *target
		sent     bool
		attempts int
	}{
		{"first try", &target{}, true, 1},
		{"after two failures", &target{fails: 2, err: errors.New("503")}, true, 3},
		{"down: gives up after Attempts", &target{fails: 100, err: errors.New("refused")}, false, 4},
		{"permanent: no retry", &target{fails: 100, err: &Permanent{errors.New("404")}}, false, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{got: map[string]outcome{}}
			q := New(Options{Backoff: time.Millisecond}, rec)
			q.Send(&Message{ID: "n1"}, "notify[0]", tt.t)
			if left := q.Flush(time.Minute); left != 0 {
				t.Fatalf("Flush left %d", left)
			}
			got := rec.got["n1"]
			if got.sent != tt.sent || got.attempts != tt.attempts {
				t.Errorf("outcome = sent %v after %d, want sent %v after %d", got.sent, got.attempts, tt.sent, tt.attempts)
			}
		})
	}
}

func TestFlushRecordsUnsent(t *testing.T) {
	rec := &recorder{got: map[string]outcome{}}
	q := New(Options{Timeout: time.Hour}, rec)
	q.Send(&Message{ID: "stuck"}, "notify[0]", &target{block: true})
	if left := q.Flush(10 * time.Millisecond); left != 1 {
		t.Fatalf("Flush left %d, want 1", left)
	}
	if got := rec.got["stuck"]; got.sent || !errors.Is(got.err, ErrUnsent) {
		t.Errorf("outcome = %+v, want failed with ErrUnsent", got)
	}
}
