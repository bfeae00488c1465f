package remote

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestDoSaysWhatItWaitsFor checks that a call the hub does not answer is
// named once, after WaitNotice, while it is retried: a coordinator waiting
// on a missing hub node says what it waits for instead of nothing.
func TestDoSaysWhatItWaitsFor(t *testing.T) {
	var mu sync.Mutex
	var said []string
	c := &Client{cfg: Config{CallTimeout: 10 * time.Millisecond, GiveUp: 400 * time.Millisecond, WaitNotice: 50 * time.Millisecond,
		Waiting: func(what string, waited time.Duration, cause error) {
			mu.Lock()
			defer mu.Unlock()
			said = append(said, what+": "+cause.Error())
		}}}
	err := c.Do(t.Context(), "dispatch step a", func(ctxCall context.Context) error { return errors.New("no responders available") })
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("Do() = %v, want an *UnreachableError", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(said) != 1 || !strings.HasPrefix(said[0], "dispatch step a: no responders") {
		t.Errorf("Waiting was told %q, want once of dispatch step a", said)
	}
}
