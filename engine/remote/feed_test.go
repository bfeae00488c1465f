package remote_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
)

// TestFeedReadsWhatWasStoredWhileDisconnected: an event stored while the
// coordinator's connection was down rang nobody; the connection's return
// rings the feed, which reads it then, not at its next slow poll (here an
// hour away, so only the reconnection can bring it).
func TestFeedReadsWhatWasStoredWhileDisconnected(t *testing.T) {
	cl := hubtest.Start(t, 1)
	proxy := hubtest.NewProxy(t, strings.TrimPrefix(cl.URLs(), "nats://"))
	worker, coordinator := connect(t, cl.URLs()), connect(t, proxy.URL())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := worker.Ensure(ctx, 1, false); err != nil {
		t.Fatal(err)
	}
	const task = "feed-reconnect"
	feed, err := coordinator.NewFeed(ctx, remote.EventsStream, remote.TaskEvents(task), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	remote.SetFeedPoll(feed, time.Hour)
	report := func(data string) {
		t.Helper()
		if _, err := worker.JS.Publish(ctx, remote.EventSubject("default", task), []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	read := func(want string) { t.Helper(); readFeed(ctx, t, feed, want) }
	// Read an event on its ring: the feed then waits for the next ring
	// instead of looking.
	for i := 1; !remote.FeedWaitsForRing(feed); i++ {
		if i > 10 {
			t.Fatal("no event was read on its ring")
		}
		got := make(chan error, 1)
		go func() { _, err := feed.Next(ctx); got <- err }()
		time.Sleep(time.Duration(i) * 50 * time.Millisecond) // the read waits
		report(fmt.Sprintf("before %d", i))
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}

	proxy.Cut()
	for coordinator.NC.IsConnected() {
		time.Sleep(10 * time.Millisecond)
	}
	report("while away")
	report("while away, too")
	proxy.Restore()
	read("while away")
	read("while away, too")

	report("after")
	read("after")
}

// TestEventFeedTakesRings: a feed of a task's events in one pool takes each
// event from the hub's ring, which carries it, without reading the stream;
// an event on another pool's subject is read, in the stream's order; and a
// ring that shows an earlier event of the pool unread (one whose ring was
// lost) is not taken.
func TestEventFeedTakesRings(t *testing.T) {
	cl := hubtest.Start(t, 1)
	c := connect(t, cl.URLs())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := c.Ensure(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	// The feed's reads, echoed to the same connection: queued on sub
	// before a flush returns.
	sub, err := c.NC.SubscribeSync("$JS.API.STREAM.MSG.GET." + remote.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1)
	reads := func() int {
		t.Helper()
		if err := c.NC.Flush(); err != nil {
			t.Fatal(err)
		}
		n, _, err := sub.Pending()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	const task = "feed-rings"
	feed, err := c.NewEventFeed(ctx, task, []string{"p"}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	remote.SetFeedPoll(feed, time.Hour) // no read but a ring's
	publish := func(pool, data string) uint64 {
		t.Helper()
		ack, err := c.JS.Publish(ctx, remote.EventSubject(pool, task), []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	read := func(want string) { t.Helper(); readFeed(ctx, t, feed, want) }
	publish("p", "first")
	read("first") // the first read finds it (or its ring)
	before := reads()
	for i := range 5 {
		publish("p", fmt.Sprintf("event %d", i))
	}
	for remote.FeedRings(feed) < 5 { // each stored event's ring, in the feed
		if ctx.Err() != nil {
			t.Fatal("the hub did not ring for 5 events")
		}
		time.Sleep(time.Millisecond)
	}
	for i := range 5 {
		read(fmt.Sprintf("event %d", i))
	}
	if n := reads() - before; n != 0 {
		t.Errorf("5 events of the feed's one pool took %d reads of the stream; want 0 (each taken from its ring)", n)
	}
	// Another pool's event (a stale or forged report) is read, in order.
	publish("q", "other pool")
	publish("p", "after it")
	read("other pool")
	read("after it")
	if reads() == before {
		t.Error("the other pool's event was not read from the stream")
	}

	// A report that names its own sequence (its headers come before the
	// hub's in its ring) is read from the stream, as the hub stored it.
	forged := nats.NewMsg(remote.EventSubject("p", task))
	forged.Header.Set(jetstream.SequenceHeader, "999999")
	forged.Header.Set(jetstream.LastSequenceHeader, "0")
	forged.Data = []byte("forged")
	ack, err := c.JS.PublishMsg(ctx, forged)
	if err != nil {
		t.Fatal(err)
	}
	before = reads()
	if m, err := feed.Next(ctx); err != nil || string(m.Data) != "forged" || m.Sequence != ack.Sequence {
		t.Fatalf("read %v (%v), want the report at %d", m, err, ack.Sequence)
	}
	if reads() == before {
		t.Error("a ring with the report's own sequence header was taken")
	}

	// A ring whose message's predecessor on the subject is unread.
	seq := publish("p", "behind a lost ring")
	ring := func(seq, prev uint64) *nats.Msg {
		m := nats.NewMsg(remote.StoredSubject(remote.EventSubject("p", task)))
		m.Header.Set(jetstream.StreamHeader, remote.EventsStream)
		m.Header.Set(jetstream.SubjectHeader, remote.EventSubject("p", task))
		m.Header.Set(jetstream.SequenceHeader, strconv.FormatUint(seq, 10))
		m.Header.Set(jetstream.LastSequenceHeader, strconv.FormatUint(prev, 10))
		m.Data = []byte("x")
		return m
	}
	if remote.FeedTakes(feed, ring(seq+1, seq)) {
		t.Error("a ring was taken while the message before it on its subject was unread")
	}
	read("behind a lost ring")
	if !remote.FeedTakes(feed, ring(seq+5, seq)) {
		t.Error("a ring whose predecessor was read was not taken")
	}
	headersOnly := ring(seq+5, seq)
	headersOnly.Header.Set("Nats-Msg-Size", "1")
	if remote.FeedTakes(feed, headersOnly) {
		t.Error("a ring of headers only was taken as a message")
	}
}

// readFeed reads feed's next message and fails unless it holds want.
func readFeed(ctx context.Context, t *testing.T, feed *remote.Feed, want string) {
	t.Helper()
	m, err := feed.Next(ctx)
	if err != nil {
		t.Fatalf("waiting for %q: %v", want, err)
	}
	if string(m.Data) != want {
		t.Fatalf("read %q, want %q", m.Data, want)
	}
}
