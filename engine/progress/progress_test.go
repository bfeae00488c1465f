package progress

import (
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/engine/clock"
)

// lockedBuffer is a strings.Builder safe for the board's goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBoardTicks checks that the live board redraws a running step's
// elapsed time as its clock ticks, without waiting in real time.
func TestBoardTicks(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC))
	var out lockedBuffer
	b := newBoard(&out, false, clk)
	b.Begin("t", "log.jsonl", 2, 0, "")
	b.Started("slow", 0)
	clk.Advance(90 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "slow                     1m30s") {
		if time.Now().After(deadline) {
			t.Fatalf("the board never showed 1m30s for the running step:\n%s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	b.Finish("done\n")
	if !strings.HasSuffix(out.String(), "done\n") {
		t.Errorf("finish did not print the summary last:\n%s", out.String())
	}
}
