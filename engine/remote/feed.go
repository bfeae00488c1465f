package remote

import (
	"context"
	"errors"
	"strconv"
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
//
// A feed whose messages all come on one subject of its filter (a task
// with one pool) takes a ring that carries its message as that message,
// without a read, when the ring shows that the subject's message before
// it was read (the hub's Nats-Last-Sequence): see take.
type Feed struct {
	c       *Client
	stream  jetstream.Stream
	subject string
	// only is the one subject whose rings may be taken as messages ("":
	// every message is read from the stream).
	only string
	next uint64
	// bell holds the rings not yet heard (nil: rings may have been lost).
	bell chan *nats.Msg
	sub  *nats.Subscription
	// stored: the bell rings once per message the hub stored (it
	// republishes them). waitRing: the last message was read on its ring
	// and no ring was dropped (dropped: the bell was full), so the next
	// read waits for a ring first; a message read on the slow poll (rings
	// lost in a reconnection) or after a dropped ring is followed by
	// reads until one finds nothing. rang: the last wait ended on a ring.
	stored, waitRing, rang bool
	dropped                atomic.Bool
	// heard is the highest sequence a ring that was not taken named: a
	// read that ends below it is followed by another, not by a wait.
	heard uint64
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
	return c.newFeed(ctx, stream, subject, "", from)
}

// NewEventFeed starts reading a task's events at sequence from. With one
// pool, whose subject then carries all of them, the hub's rings are taken
// as the events they carry; with several, each event is read.
func (c *Client) NewEventFeed(ctx context.Context, taskID string, pools []string, from uint64) (*Feed, error) {
	only := ""
	if len(pools) == 1 {
		only = EventSubject(orDefault(pools[0]), taskID)
	}
	return c.newFeed(ctx, EventsStream, TaskEvents(taskID), only, from)
}

func (c *Client) newFeed(ctx context.Context, stream, subject, only string, from uint64) (*Feed, error) {
	s, err := c.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	f := &Feed{c: c, stream: s, subject: subject, only: only, next: max(from, 1), bell: make(chan *nats.Msg, 1), poll: pollEvery}
	ring := func(m *nats.Msg) {
		if f.only == "" || len(m.Data) > maxTakenRing {
			m.Data = nil // read from the stream if the ring is heard
		}
		select {
		case f.bell <- m:
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
		bell, f.stored, f.bell = StoredSubject(subject), true, make(chan *nats.Msg, 1024)
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
	case f.bell <- nil:
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
		if !f.waitRing && !f.rang && f.only != "" {
			// A ring heard already may carry the next message (unless
			// the last one heard asked for a read).
			if m := f.hearPending(); m != nil {
				return m, nil
			}
		}
		if !f.waitRing {
			m, err := f.TryNext(ctx)
			if m != nil {
				f.quick = quickPoll
				f.waitRing = f.stored && f.rang && !f.dropped.Load() && f.next > f.heard
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
		m, err := f.await(ctx, wait)
		if m != nil || err != nil {
			return m, err
		}
	}
}

// await waits up to wait for a ring: it returns the message a ring
// carried when take accepts it, and nothing when the feed should read
// (a ring, rings lost, or the wait over). A ring of a message read
// already is passed over.
func (f *Feed) await(ctx context.Context, wait time.Duration) (*jetstream.RawStreamMsg, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case r := <-f.bell:
			if m, read := f.hear(r); m != nil || read {
				return m, nil
			}
		case <-t.C:
			return nil, nil
		}
	}
}

// hear takes in ring r: the message it carries when take accepts it; read
// when the feed should read instead; neither for the ring of a message
// read already.
func (f *Feed) hear(r *nats.Msg) (m *jetstream.RawStreamMsg, read bool) {
	if m := f.take(r); m != nil {
		f.next, f.quick = m.Sequence+1, quickPoll
		f.waitRing = !f.dropped.Load()
		return m, false
	}
	seq, ok := ringSeq(r, jetstream.SequenceHeader)
	if ok && seq < f.next && !f.dropped.Load() {
		return nil, false // read already, with the one before it
	}
	f.heard = max(f.heard, seq)
	f.quick, f.rang = quickPoll, true
	return nil, true
}

// hearPending takes in the rings heard already, up to the first that
// gives a message or asks for a read.
func (f *Feed) hearPending() *jetstream.RawStreamMsg {
	for {
		select {
		case r := <-f.bell:
			if m, read := f.hear(r); m != nil || read {
				return m
			}
		default:
			return nil
		}
	}
}

// maxTakenRing bounds the payload a feed keeps from a ring to take it as
// its message; a larger one is read from the stream, so rings waiting to
// be heard hold little memory.
const maxTakenRing = 16 << 10

// msgSizeHeader marks a ring that carries only a stored message's headers.
const msgSizeHeader = "Nats-Msg-Size"

// take returns the message ring r carries, if it is the feed's next: r
// came from the hub's republication of what it stored (its Nats-*
// headers), with the payload, on the feed's one subject; its message is
// not read yet, and the subject's message before it (Nats-Last-Sequence,
// the subject's last sequence when the hub stored it) is. No message of
// another subject can lie between: none comes on the filter's others but
// a stale or refused report, whose ring, heard first, makes the feed read.
// A ring dropped (the bell full) or lost in a reconnection makes it read
// too (dropped).
//
// Only the hub publishes rings (a worker may publish its reports, never on
// apollo.stored.…), but a report's own headers are kept in its ring, before
// the hub's: a ring whose Nats-* headers are not the hub's alone (a report
// that named its own sequence, say) is read from the stream instead.
func (f *Feed) take(r *nats.Msg) *jetstream.RawStreamMsg {
	if r == nil || r.Data == nil || f.only == "" || !f.stored || f.dropped.Load() ||
		r.Header.Get(msgSizeHeader) != "" {
		return nil
	}
	if subj, ok := ringHeader(r, jetstream.SubjectHeader); !ok || subj != f.only {
		return nil
	}
	seq, ok := ringSeq(r, jetstream.SequenceHeader)
	prev, okPrev := ringSeq(r, jetstream.LastSequenceHeader)
	if !ok || !okPrev || seq < f.next || prev >= f.next {
		return nil
	}
	at, _ := time.Parse(time.RFC3339Nano, r.Header.Get(jetstream.TimeStampHeaer))
	return &jetstream.RawStreamMsg{Subject: f.only, Sequence: seq, Header: r.Header, Data: r.Data, Time: at}
}

// ringHeader is the value of a header the hub sets on a ring, if the ring
// holds that header once.
func ringHeader(r *nats.Msg, header string) (string, bool) {
	if r == nil || r.Header == nil {
		return "", false
	}
	v := r.Header.Values(header)
	if len(v) != 1 || v[0] == "" {
		return "", false
	}
	return v[0], true
}

// ringSeq reads a sequence header of a ring.
func ringSeq(r *nats.Msg, header string) (uint64, bool) {
	v, ok := ringHeader(r, header)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(v, 10, 64)
	return n, err == nil
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
