package remote

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Feed reads the messages of one subject of a stream in stream order, from
// a sequence on. Each read is one call with a deadline (a message get by
// subject, answered by the stream's leader), so a fail-over costs a retry
// and never a consumer to rebuild; a core subscription to the same subject
// rings when something new may be there. Rings are lost while the client
// is disconnected, so its reconnection rings every feed; a slow poll
// covers a ring lost otherwise (a stream's leader changed as it stored
// the message, a route between nodes dropped).
type Feed struct {
	c       *Client
	stream  jetstream.Stream
	subject string
	next    uint64
	bell    chan struct{}
	sub     *nats.Subscription
	// stored: the bell rings once per message the hub stored (it
	// republishes them). waitRing: the last message was read on its ring
	// and no ring was dropped (dropped: the bell was full), so the next
	// read waits for a ring first; a message read on the slow poll (rings
	// lost in a reconnection) or after a dropped ring is followed by
	// reads until one finds nothing. rang: the last wait ended on a ring.
	stored, waitRing, rang bool
	dropped                atomic.Bool
	// quick is the next wait while the subject is busy: set after a ring
	// or a message, doubled up to poll while nothing comes.
	quick time.Duration
	// poll is how often the feed looks when nothing rang (pollEvery).
	poll time.Duration
}

// pollEvery is how often a feed looks when nothing rang: each look is a
// request every node of the hub reads, so a coordinator waiting hours for
// a long step makes few; quickPoll is the first wait after a ring or a
// message on a hub that does not republish what it stores.
const (
	pollEvery = 2 * time.Second
	quickPoll = 2 * time.Millisecond
)

// NewFeed starts reading subject of stream at sequence from (1: the start).
func (c *Client) NewFeed(ctx context.Context, stream, subject string, from uint64) (*Feed, error) {
	s, err := c.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	f := &Feed{c: c, stream: s, subject: subject, next: max(from, 1), bell: make(chan struct{}, 1), poll: pollEvery}
	ring := func(*nats.Msg) {
		select {
		case f.bell <- struct{}{}:
		default:
			f.dropped.Store(true)
		}
	}
	// A hub that republishes what it stored (setup.go) rings once the
	// message can be read, so the feed reads it at once, with one read;
	// on another, the publication rings, before a replicated stream has
	// stored it, and the feed looks again soon after.
	bell := subject
	if info := s.CachedInfo(); info != nil && info.Config.RePublish != nil {
		// One ring per stored message, kept: after a message, the feed
		// waits for the next ring instead of looking again at once.
		bell, f.stored, f.bell = StoredSubject(subject), true, make(chan struct{}, 1024)
	}
	if f.sub, err = c.NC.Subscribe(bell, ring); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.feeds[f] = struct{}{}
	c.mu.Unlock()
	return f, nil
}

// Close stops the feed.
func (f *Feed) Close() {
	f.c.mu.Lock()
	delete(f.c.feeds, f)
	f.c.mu.Unlock()
	if f.sub != nil {
		f.sub.Unsubscribe()
	}
}

// ringsLost rings the feed after rings may have been lost (the client was
// disconnected): it reads until it finds nothing, as after a dropped ring.
func (f *Feed) ringsLost() {
	f.dropped.Store(true)
	select {
	case f.bell <- struct{}{}:
	default:
	}
}

// Cursor is the sequence the next message will have at least.
func (f *Feed) Cursor() uint64 { return f.next }

// Next returns the next message, waiting for one until ctx ends. Its error
// is ctx's, or an *UnreachableError.
//
// On a hub that republishes what it stores, each stored message rings once
// and the feed reads it then. Elsewhere, after a ring or a message, it
// looks again soon and then less and less often: a ring comes when a
// message is published, before a replicated stream has stored it, and the
// ring of a message published close behind another is lost while the
// first's is pending (the bell holds one).
func (f *Feed) Next(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	for {
		if !f.waitRing {
			m, err := f.TryNext(ctx)
			if m != nil {
				f.quick = quickPoll
				f.waitRing = f.stored && f.rang && !f.dropped.Load()
			}
			if err != nil || m != nil {
				return m, err
			}
			f.dropped.Store(false) // every message stored so far is read
		}
		f.waitRing, f.rang = false, false
		wait := f.poll
		if f.quick > 0 && f.quick < f.poll && !f.stored {
			wait, f.quick = f.quick, f.quick*2
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-f.bell:
			f.quick, f.rang = quickPoll, true
		case <-t.C:
		}
		t.Stop()
	}
}

// TryNext returns the next message, or nil if there is none now.
func (f *Feed) TryNext(ctx context.Context) (*jetstream.RawStreamMsg, error) {
	var m *jetstream.RawStreamMsg
	err := f.c.Do(ctx, "read "+f.subject, func(ctx context.Context) error {
		var err error
		m, err = f.stream.GetMsg(ctx, f.next, jetstream.WithGetMsgSubject(f.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			m = nil
			return nil
		}
		return err
	})
	if err != nil || m == nil {
		return nil, err
	}
	f.next = m.Sequence + 1
	return m, nil
}
