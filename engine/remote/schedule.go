package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// SchedStream is the stream of the schedule logs of apollo serve processes
// that share their schedules through the hub (docs/spec.md §8.9).
const SchedStream = "APOLLO_SCHED"

// SchedSubject is the subject of a schedule group's log.
func SchedSubject(group string) string { return "apollo.sched." + group }

// SchedLeaseKey is a schedule group's key in the lease bucket: the serve
// holding it leads the group's schedules.
func SchedLeaseKey(group string) string { return "sched." + group }

// MinLeaseTTL is the shortest lease the hub can time: a key's TTL is at
// least a second.
const MinLeaseTTL = time.Second

// DeposedError says a serve that led a schedule group no longer does:
// another took the lead, or this one could not renew its lease within its
// life. It must act on nothing more until it leads again.
type DeposedError struct {
	Group string
	Why   string
}

func (e *DeposedError) Error() string {
	return fmt.Sprintf("schedule group %s: this apollo serve no longer leads: %s", e.Group, e.Why)
}

// Schedules is one apollo serve's side of a schedule group on the hub: the
// lease that says which serve leads, a key with a TTL that the hub expires
// by its own clock, renewed by a write that keeps the TTL and compares the
// revision in one; and the group's log, a subject of SchedStream, to which
// each append carries the subject's last sequence as this serve knows it,
// so that the hub refuses the append of a serve another has followed.
//
// The leader acts only while time.Since(its last renewal's start) is below
// the TTL: the hub may have expired the key after that, and without a
// quorum nothing tells it so.
type Schedules struct {
	c     *Client
	kv    jetstream.KeyValue
	group string
	key   string
	me    []byte
	ttl   time.Duration

	mu      sync.Mutex
	rev     uint64    // the lease's revision while this serve leads; 0 when it does not
	renewed time.Time // when the last successful take or renewal was sent (monotonic)
	last    uint64    // the log's last stream sequence as this serve knows it
	stream  jetstream.Stream
}

// NewSchedules opens schedule group group for the serve me, whose lease
// lasts ttl without a renewal.
func (c *Client) NewSchedules(ctx context.Context, group string, me Holder, ttl time.Duration) (*Schedules, error) {
	if !ValidPool(group) {
		return nil, fmt.Errorf("schedule group %q: use letters, digits, '_' and '-'", group)
	}
	if ttl < MinLeaseTTL {
		return nil, fmt.Errorf("schedule lease TTL %s: the hub times keys to the second; give at least %s", ttl, MinLeaseTTL)
	}
	kv, err := c.kv(ctx, LeaseBucket)
	if err != nil {
		return nil, err
	}
	st, err := c.Stream(ctx, SchedStream)
	if err != nil {
		return nil, err
	}
	val, _ := json.Marshal(me)
	return &Schedules{c: c, kv: kv, group: group, key: SchedLeaseKey(group), me: val, ttl: ttl, stream: st}, nil
}

// TTL is the lease's life without a renewal.
func (s *Schedules) TTL() time.Duration { return s.ttl }

// deadline is when this serve must stop acting on its lease; zero when it
// does not lead. s.mu is held.
func (s *Schedules) deadline() time.Time {
	if s.rev == 0 {
		return time.Time{}
	}
	return s.renewed.Add(s.ttl)
}

// Leading reports whether this serve leads and its lease's life has not
// run out since its last renewal.
func (s *Schedules) Leading() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rev != 0 && time.Now().Before(s.deadline())
}

// Lead takes the lead when no serve holds it, or renews it when this one
// does. It reports whether this serve leads, and otherwise who does
// (host, pid and state folder), as the hub says. A lead this serve held and
// lost is an error of type *DeposedError, with leading false.
func (s *Schedules) Lead(ctx context.Context) (leading bool, holder string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rev != 0 {
		return s.renew(ctx)
	}
	var rev uint64
	sent := time.Now()
	err = s.c.Do(ctx, "take the lead of schedule group "+s.group, func(ctx context.Context) error {
		sent = time.Now()
		r, err := s.kv.Create(ctx, s.key, s.me, jetstream.KeyTTL(s.ttl))
		if err == nil {
			rev = r
			return nil
		}
		if ttlRefused(err) {
			return Final(fmt.Errorf("the hub's bucket %s does not let keys expire (a hub set up by an older apollo): "+
				"restart its apollo hub nodes, which update it: %w", LeaseBucket, err))
		}
		if !LostRace(err) {
			return err
		}
		e, err := s.c.leaseEntry(ctx, s.key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return errors.New("the lease lapsed while taking it; again")
		}
		if err != nil {
			return err
		}
		if bytes.Equal(e.Data, s.me) { // a take whose answer was lost
			rev = e.Sequence
			return nil
		}
		holder = describeHolder(e.Data)
		return nil
	})
	if err != nil || rev == 0 {
		return false, holder, err
	}
	s.rev, s.renewed = rev, sent
	return true, "", nil
}

// renew renews the lease by one write that sets its TTL again and compares
// its revision (a KV Update would drop the TTL: the lease would never
// expire). It gives up when the lease's life has run out. s.mu is held.
func (s *Schedules) renew(ctx context.Context) (bool, string, error) {
	ctx, cancel := context.WithDeadline(ctx, s.deadline())
	defer cancel()
	var rev uint64
	var holder string
	sent := time.Now()
	err := s.c.Do(ctx, "renew the lead of schedule group "+s.group, func(ctx context.Context) error {
		sent = time.Now()
		m := &nats.Msg{Subject: "$KV." + LeaseBucket + "." + s.key, Data: s.me}
		ack, err := s.c.JS.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(s.rev), jetstream.WithMsgTTL(s.ttl))
		if err == nil {
			rev = ack.Sequence
			return nil
		}
		if !LostRace(err) {
			return err
		}
		// The revision moved: a renewal of ours whose answer was lost, or
		// another serve's take after the key expired.
		e, gerr := s.c.leaseEntry(ctx, s.key)
		if gerr != nil && !errors.Is(gerr, jetstream.ErrKeyNotFound) {
			return gerr
		}
		if e != nil && bytes.Equal(e.Data, s.me) {
			rev = e.Sequence
			return nil
		}
		if e != nil {
			holder = describeHolder(e.Data)
		} else {
			holder = "no serve (the lease lapsed)"
		}
		return Final(&DeposedError{Group: s.group, Why: "its lease was taken over by " + holder})
	})
	if err == nil {
		s.rev, s.renewed = rev, sent
		return true, "", nil
	}
	s.rev = 0
	if _, ok := errors.AsType[*DeposedError](err); ok {
		return false, holder, err
	}
	return false, "", &DeposedError{Group: s.group, Why: fmt.Sprintf("its lease could not be renewed within its %s life: %v", s.ttl, err)}
}

// ttlRefused reports the hub's refusal of a key TTL on a bucket that does
// not allow them (10166).
func ttlRefused(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.ErrorCode == 10166
}

// describeHolder renders a lease's value for people.
func describeHolder(val []byte) string {
	var h Holder
	if json.Unmarshal(val, &h) != nil || h.Host == "" {
		return "another apollo serve"
	}
	return fmt.Sprintf("apollo serve process %d on host %s (state folder %s, leading since %s)",
		h.PID, h.Host, h.StateDir, h.Since.UTC().Format(time.RFC3339))
}

// Resign gives the lead up, if this serve holds it, so that another takes
// it at once instead of after the TTL.
func (s *Schedules) Resign(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rev == 0 {
		return nil
	}
	rev := s.rev
	s.rev = 0
	ctx, cancel := context.WithTimeout(ctx, s.c.cfg.CallTimeout)
	defer cancel()
	err := s.kv.Delete(ctx, s.key, jetstream.LastRevision(rev))
	if err != nil && (LostRace(err) || errors.Is(err, jetstream.ErrKeyNotFound)) {
		return nil
	}
	return err
}

// Records reads the group's log from its start, in order, and takes its
// last sequence as the expectation of the next append. The leader reads it
// when it takes the lead.
func (s *Schedules) Records(ctx context.Context) ([][]byte, error) {
	f, err := s.c.NewFeed(ctx, SchedStream, SchedSubject(s.group), 1)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out [][]byte
	var last uint64
	for {
		m, err := f.TryNext(ctx)
		if err != nil {
			return nil, err
		}
		if m == nil {
			break
		}
		out = append(out, m.Data)
		last = m.Sequence
	}
	s.mu.Lock()
	s.last = last
	s.mu.Unlock()
	return out, nil
}

// Append appends line to the group's log and returns once the hub has
// stored it. It refuses (a *DeposedError) when this serve does not lead,
// when its lease's life has run out since its last renewal, or when the
// log moved past what this serve read: another serve wrote it since.
func (s *Schedules) Append(ctx context.Context, line []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.rev == 0 {
		return &DeposedError{Group: s.group, Why: "it does not hold the lead"}
	}
	dl := s.deadline()
	if !time.Now().Before(dl) {
		s.rev = 0
		return &DeposedError{Group: s.group, Why: fmt.Sprintf("its lease was not renewed for %s, its life", s.ttl)}
	}
	ctx, cancel := context.WithDeadline(ctx, dl)
	defer cancel()
	var seq uint64
	err := s.c.Do(ctx, "append to the schedule log of group "+s.group, func(ctx context.Context) error {
		ack, err := s.c.JS.Publish(ctx, SchedSubject(s.group), line, jetstream.WithExpectLastSequencePerSubject(s.last))
		if err == nil {
			seq = ack.Sequence
			return nil
		}
		if !LostRace(err) {
			if permanent(err) {
				return Final(err)
			}
			return err
		}
		// The log moved: this append, stored by a try whose answer was
		// lost, or another serve's.
		m, gerr := s.stream.GetLastMsgForSubject(ctx, SchedSubject(s.group))
		if gerr != nil {
			return gerr
		}
		if bytes.Equal(m.Data, line) && m.Sequence > s.last {
			seq = m.Sequence
			return nil
		}
		return Final(&DeposedError{Group: s.group, Why: "the hub refused its append: another apollo serve wrote the schedule log since"})
	})
	if err != nil {
		s.rev = 0
		if _, ok := errors.AsType[*DeposedError](err); ok {
			return err
		}
		return &DeposedError{Group: s.group, Why: "its append was not stored within its lease's life: " + err.Error()}
	}
	s.last = seq
	return nil
}

// TaskHolder reports the coordinator that holds a task's lease: its key is
// there, which the hub removes a TTL after the holder's last renewal by its
// own clock (no host compares its clock with the entry's time). apollo
// serve asks it of a run that a serve which led before started: such a run
// is watched, not started again.
func (c *Client) TaskHolder(ctx context.Context, taskID string) (h Holder, held bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.CallTimeout)
	defer cancel()
	e, err := c.leaseEntry(ctx, LeaseKey(taskID))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, err
	}
	_ = json.Unmarshal(e.Data, &h)
	return h, true, nil
}
