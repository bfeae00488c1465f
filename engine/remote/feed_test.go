package remote_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
	read := func(want string) {
		t.Helper()
		m, err := feed.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v", want, err)
		}
		if string(m.Data) != want {
			t.Fatalf("read %q, want %q", m.Data, want)
		}
	}
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
