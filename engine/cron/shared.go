package cron

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Shared is the hub's side of schedules that several apollo serve
// processes share (docs/spec.md §8.9): a lease that says which serve
// leads, timed by the hub, and the schedule log, kept in the hub, whose
// appends the hub refuses from a serve that another has followed.
// remote.Schedules implements it.
type Shared interface {
	// Lead takes the lead when it is free, or renews it when this serve
	// holds it. It reports whether this serve leads now, and otherwise who
	// does. A lead lost is reported with leading false (and an error
	// saying why).
	Lead(ctx context.Context) (leading bool, holder string, err error)
	// Records reads the log's lines from the start; the next Append
	// expects the log to end where they end.
	Records(ctx context.Context) ([][]byte, error)
	// Append appends one line, once the hub has stored it; it fails when
	// this serve does not lead, when its lease's life has passed since its
	// last renewal, or when another serve wrote the log since Records.
	Append(ctx context.Context, line []byte) error
	// Resign gives the lead up, so another serve takes it at once.
	Resign(ctx context.Context) error
	// TTL is the lease's life without a renewal.
	TTL() time.Duration
}

// journal is where the scheduler writes its entries: a local schedule log
// (Log) or the hub's (sharedLog).
type journal interface {
	Append(e *Entry) error
	Seq() int64
	Close() error
}

// sharedLog writes entries to the hub's schedule log of a group.
type sharedLog struct {
	sh  Shared
	seq int64
	now func() time.Time
}

// Append writes e (setting its seq and timestamp) and returns once the hub
// has stored it.
func (l *sharedLog) Append(e *Entry) error {
	e.Seq = l.seq + 1
	e.Timestamp = l.now().UTC().Format(time.RFC3339Nano)
	line, err := encode(e)
	if err != nil {
		return err
	}
	// The lease's life bounds the call; this is a last resort.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := l.sh.Append(ctx, line[:len(line)-1]); err != nil {
		return fmt.Errorf("schedule log in the hub: %w", err)
	}
	l.seq++
	return nil
}

func (l *sharedLog) Seq() int64   { return l.seq }
func (l *sharedLog) Close() error { return nil }

// EventLead is the entry of a serve (By) that took the lead of the shared
// schedules and read the log up to it; that serve acts from here on. An entry of a serve that
// led before is refused by the hub once this one is written.
const EventLead = "lead"

// leadState is what a scheduler with Options.Shared knows of the lead.
type leadState struct {
	leading bool
	holder  string // who leads, when this serve does not ("" unknown)
	why     string // why this serve stopped leading, or could not read the log
	// gen counts the leads this serve took: a child started under an
	// earlier one is not recorded by this serve when it ends (the log was
	// read anew since, and says it was running).
	gen int
	// closed: serve stops; the lead is not taken again.
	closed bool
}

// acting reports whether the scheduler may act: it keeps a local log, or
// it leads the shared schedules. s.mu is held.
func (s *Scheduler) acting() bool { return s.opts.Shared == nil || s.lead.leading }

// notLeading says why runs cannot be started here: another serve leads
// the shared schedules. s.mu is held.
func (s *Scheduler) notLeading() error {
	if s.acting() {
		return nil
	}
	who := s.lead.holder
	if who == "" {
		who = "another apollo serve"
	}
	return fmt.Errorf("this apollo serve does not lead the schedules it shares through the hub (%s does): start runs from the leader's pages", who)
}

// Leader reports whether this serve leads the shared schedules and, if not,
// who does ("" when unknown); a scheduler with a local log always leads.
func (s *Scheduler) Leader() (leading bool, holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.acting(), s.lead.holder
}

// leadLoop takes or renews the lead every third of the lease's life until
// ctx is done: a serve that dies is followed by another within the lease's
// life and a third.
func (s *Scheduler) leadLoop(ctx context.Context) {
	every := max(s.opts.Shared.TTL()/3, 100*time.Millisecond)
	for {
		s.takeLead(ctx)
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// takeLead takes or renews the lead once. On taking it, it reads the log
// from the hub, takes up what it says as a restart would (the last time
// each schedule was handled, the queue, the runs without an exit), writes
// a lead entry (which fences the serve that led before), and tracks the
// schedules seen for the first time. A lead lost stops every action at
// once.
func (s *Scheduler) takeLead(ctx context.Context) {
	s.mu.Lock()
	closed := s.lead.closed
	s.mu.Unlock()
	if closed {
		return
	}
	ok, holder, err := s.opts.Shared.Lead(ctx)
	if !ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lead.holder = holder
		if s.lead.leading {
			s.standDown(err)
		} else if err != nil && ctx.Err() == nil {
			s.opts.Logf("apollo serve: shared schedules: %v", err)
		}
		return
	}
	s.mu.Lock()
	leading := s.lead.leading
	s.mu.Unlock()
	if leading {
		return // renewed
	}
	recs, err := s.opts.Shared.Records(ctx)
	var entries []*Entry
	for i, line := range recs {
		if err != nil {
			break
		}
		var e *Entry
		if e, err = decode(line); err != nil {
			err = fmt.Errorf("entry %d of the schedule log in the hub: %w", i+1, err)
		} else if e.Seq != int64(i)+1 {
			err = fmt.Errorf("entry %d of the schedule log in the hub has seq %d", i+1, e.Seq)
		}
		entries = append(entries, e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.lead.why = "the schedule log in the hub could not be read: " + err.Error()
		s.opts.Logf("apollo serve: shared schedules: %s", s.lead.why)
		return
	}
	s.reset()
	s.replay(entries)
	s.log.(*sharedLog).seq = int64(len(entries))
	s.lead.gen++
	led := &Entry{Event: EventLead, By: s.opts.Me}
	if err := s.log.Append(led); err != nil {
		s.opts.Logf("apollo serve: shared schedules: %v", err)
		return
	}
	s.remember(led)
	s.lead.leading, s.lead.holder, s.lead.why = true, "", ""
	s.opts.Logf("apollo serve: this serve leads the shared schedules (read %d entries of the schedule log)", len(entries))
	if err := s.track(); err != nil {
		s.standDown(err)
		return
	}
	s.poke()
}

// standDown stops every action of a serve that lost the lead: it starts
// nothing more, and records nothing of the runs it started (the serve that
// leads next reads them as running). s.mu is held.
func (s *Scheduler) standDown(err error) {
	s.lead.leading = false
	s.lead.gen++
	s.lead.why = "lost the lead"
	if err != nil {
		s.lead.why = err.Error()
	}
	s.opts.Logf("apollo serve: shared schedules: this serve stops leading: %s", s.lead.why)
}

// resign gives the lead up at the end of serve, so that another serve takes
// it at once.
func (s *Scheduler) resign() {
	if s.opts.Shared == nil {
		return
	}
	s.mu.Lock()
	s.lead.leading, s.lead.closed = false, true
	s.lead.gen++
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.opts.Shared.Resign(ctx); err != nil && !errors.Is(err, context.Canceled) {
		s.opts.Logf("apollo serve: shared schedules: give the lead up: %v", err)
	}
}
