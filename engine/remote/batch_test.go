package remote_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
)

// TestLogAppendBatch: records appended together reach a 3-node hub as one
// atomic batch — all of them, in order, each with its seq — and a
// coordinator another has replaced has its whole batch refused: a
// FencedError, and not one of its records stored.
func TestLogAppendBatch(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node hub")
	}
	cl := hubtest.Start(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: cl.URLs(), Name: "batch", CallTimeout: 2 * time.Second, GiveUp: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ensure(ctx, 3, true); err != nil {
		t.Fatal(err)
	}
	mine, err := c.OpenLog(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	stale, err := c.OpenLog(ctx, "t") // opened before mine writes: it expects an empty log
	if err != nil {
		t.Fatal(err)
	}
	lines := func(first, n int) [][]byte {
		var ls [][]byte
		for s := first; s < first+n; s++ {
			ls = append(ls, fmt.Appendf(nil, "{\"seq\":%d}\n", s))
		}
		return ls
	}
	if err := mine.AppendBatch(ctx, 1, lines(1, 5)); err != nil {
		t.Fatal(err)
	}
	if err := mine.AppendBatch(ctx, 6, lines(6, 1)); err != nil {
		t.Fatal(err)
	}
	if mine.Last() != 6 {
		t.Errorf("after two batches the log ends at seq %d, want 6", mine.Last())
	}
	var fenced *remote.FencedError
	if err := stale.AppendBatch(ctx, 1, lines(1, 3)); !errors.As(err, &fenced) {
		t.Fatalf("a stale coordinator's batch: %v, want a FencedError", err)
	}
	var got []string
	if err := mine.Read(ctx, func(seq int64, line []byte, _ string) error {
		if want := fmt.Sprintf("{\"seq\":%d}\n", len(got)+1); seq != int64(len(got)+1) || string(line) != want {
			return fmt.Errorf("record %d read as seq %d %q, want %q", len(got)+1, seq, line, want)
		}
		got = append(got, string(line))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 6 {
		t.Errorf("the hub holds %d records of the task, want the 6 appended (none of the stale batch)", len(got))
	}
	s, err := c.JS.Stream(ctx, remote.LogStream)
	if err != nil {
		t.Fatal(err)
	}
	for seq, batch := range map[uint64]bool{1: true, 5: true, 6: false} {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get("Nats-Batch-Id") != ""; got != batch {
			t.Errorf("stream message %d (record %s) stored in an atomic batch: %v, want %v", seq, m.Header.Get(remote.HeaderSeq), got, batch)
		}
	}
}

// TestLogAppendBatchOldStream: on a log stream an older apollo made, which
// takes no atomic batches, records appended together are stored one by
// one; a coordinator's set-up then allows batches, keeping the records.
func TestLogAppendBatchOldStream(t *testing.T) {
	ctx, c, l := onOldLogStream(t)
	if err := l.AppendBatch(ctx, 1, [][]byte{[]byte("{\"seq\":1}\n"), []byte("{\"seq\":2}\n")}); err != nil {
		t.Fatalf("a batch on a stream without atomic batches: %v", err)
	}
	if info := setUpLogStream(ctx, t, c); !info.Config.AllowAtomicPublish || info.State.Msgs != 2 {
		t.Errorf("after a coordinator's set-up the log stream allows atomic batches %v and holds %d record(s), want true and 2",
			info.Config.AllowAtomicPublish, info.State.Msgs)
	}
	if err := l.AppendBatch(ctx, 3, [][]byte{[]byte("{\"seq\":3}\n"), []byte("{\"seq\":4}\n")}); err != nil || l.Last() != 4 {
		t.Errorf("a batch after the set-up: %v, the log ends at seq %d; want it stored, ending at 4", err, l.Last())
	}
}

// onOldLogStream starts a 1-node hub whose log stream is made as an older
// apollo did (direct gets, no atomic batches), and opens task old's log on
// it, without a coordinator's set-up.
func onOldLogStream(t *testing.T) (context.Context, *remote.Client, *remote.Log) {
	t.Helper()
	c := connect(t, hubtest.Start(t, 1).URLs())
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	t.Cleanup(cancel)
	if err := c.JS.DeleteStream(ctx, remote.LogStream); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatal(err)
	}
	if _, err := c.JS.CreateStream(ctx, jetstream.StreamConfig{Name: remote.LogStream, Subjects: []string{"apollo.log.>"},
		Storage: jetstream.FileStorage, AllowDirect: true, DenyDelete: true}); err != nil {
		t.Fatal(err)
	}
	l, err := c.OpenLog(ctx, "old")
	if err != nil {
		t.Fatal(err)
	}
	return ctx, c, l
}

// setUpLogStream runs a coordinator's set-up of the hub and returns what
// the log stream is then.
func setUpLogStream(ctx context.Context, t *testing.T, c *remote.Client) *jetstream.StreamInfo {
	t.Helper()
	if err := c.Ensure(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	s, err := c.JS.Stream(ctx, remote.LogStream)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo()
}
