package remote_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
)

// TestLogStreamBound: the log stream bounded (apollo hub --log-max-bytes,
// docs/spec.md §8.8) refuses a record once full, with a LogFullError that
// says what to do — at once, not as a transient error retried until the
// give-up limit — and drops nothing: every record stored before is still
// there. Raised again, the same append goes through.
func TestLogStreamBound(t *testing.T) {
	cl := hubtest.Start(t, 1)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: cl.URLs(), Name: "bound", CallTimeout: time.Second,
		GiveUp: 30 * time.Second, LogMaxBytes: 32 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ensure(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	l, err := c.OpenLog(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("x", 1000)
	var full *remote.LogFullError
	seq := int64(1)
	for ; seq < 1000; seq++ {
		err := l.Append(ctx, seq, fmt.Appendf(nil, `{"seq":%d,"pad":%q}`+"\n", seq, pad))
		if errors.As(err, &full) {
			break
		}
		if err != nil {
			t.Fatalf("append %d: %v, want a LogFullError once the stream is full", seq, err)
		}
	}
	if full == nil {
		t.Fatal("a stream bounded to 32 KiB took 1000 records of 1 KiB")
	}
	if !strings.Contains(full.Error(), "apollo gc --hub") || !strings.Contains(full.Error(), "nothing was dropped") {
		t.Fatalf("the error says %q; want it to say nothing was dropped and how to make room", full)
	}
	got := int64(0)
	if err := l.Read(ctx, func(s int64, line []byte, _ string) error {
		if got++; s != got {
			return fmt.Errorf("record %d read as seq %d", got, s)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got != seq-1 {
		t.Fatalf("the full stream holds %d records, want the %d stored before it filled", got, seq-1)
	}

	// The bound raised (a hub restarted without it): the append goes in.
	c2, err := remote.Connect(ctx, remote.Config{URLs: cl.URLs(), Name: "unbound", CallTimeout: time.Second, GiveUp: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Ensure(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, seq, fmt.Appendf(nil, `{"seq":%d}`+"\n", seq)); err != nil {
		t.Fatalf("append once the bound is gone: %v", err)
	}
}

// TestLogStreamReadsFromLeader: a log stream an older apollo made with
// direct gets (which a lagging replica answers, with an earlier last
// record) is set to have its leader answer every read once a coordinator
// sets up on the hub, keeping its records.
func TestLogStreamReadsFromLeader(t *testing.T) {
	ctx, c, l := onOldLogStream(t)
	if err := l.Append(ctx, 1, []byte("{\"seq\":1}\n")); err != nil {
		t.Fatal(err)
	}
	if info := setUpLogStream(ctx, t, c); info.Config.AllowDirect || info.State.Msgs != 1 {
		t.Errorf("after a coordinator's set-up the log stream has direct gets %v and %d record(s), want none and 1",
			info.Config.AllowDirect, info.State.Msgs)
	}
}
