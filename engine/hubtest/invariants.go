package hubtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"apollo/engine/remote"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// Check checks the invariants of a task run on a hub (the research's test
// plan, I1–I7) and returns every breach:
//
//	I1 every step has exactly one final STEP_END (all SUCCESS here), and the summary agrees;
//	I2 no attempt has two STEP_ENDs (a superseded attempt's late end is a WARNING only);
//	I3 every execution — a side-effect file <step>.<attempt>.<worker> in artifacts — has a
//	   STEP_START of that attempt naming that worker: no body ran without a durable start;
//	I4 every STEP_START is ended by its STEP_END or a LOST, and a LOST is cleaned up before
//	   the step's next attempt is dispatched;
//	I5 seq runs 1..n (the reader checks every crc) and src_seq increases strictly;
//	I6 the work queue is empty and the pool's consumer awaits no acknowledgement (c may be
//	   nil to skip it);
//	I7 executions ≤ steps + recorded losses.
func Check(log, artifacts string, steps int, c *remote.Client) []error {
	recs, err := readTaskLog(log)
	if err != nil {
		return []error{fmt.Errorf("I5: the log does not read back: %w", err)}
	}
	var b breaches
	l := readLedger(recs, &b)
	l.checkEnds(steps, &b)
	execs := checkExecutions(artifacts, l.starts, &b)
	if int64(execs) > int64(steps)+l.lost {
		b.add("I7: %d executions for %d steps and %d losses", execs, steps, l.lost)
	}
	if c != nil {
		if err := Drained(c, remote.DefaultPool, 15*time.Second); err != nil {
			b.add("I6: %v", err)
		}
	}
	return b
}

// breaches collects the invariants' breaches in the order they are found.
type breaches []error

func (b *breaches) add(format string, args ...any) { *b = append(*b, fmt.Errorf(format, args...)) }

// readTaskLog reads the records of the task a log file is named for.
func readTaskLog(log string) ([]*eventlog.Record, error) {
	taskID, _, _, ok := statedir.ParseLogName(filepath.Base(log))
	if !ok {
		return nil, fmt.Errorf("%s is not a task's log", log)
	}
	recs, _, err := eventlog.ReadAll(log, eventlog.ReadOptions{TaskID: taskID})
	return recs, err
}

// attempt is one attempt of a step.
type attempt struct {
	step string
	n    int
}

// ledger is what a task's log says of its steps' attempts.
type ledger struct {
	final   map[string][]string // each step's final (not RUNNING) STEP_END statuses
	ends    map[attempt]int     // STEP_ENDs of each attempt
	starts  map[attempt]string  // the worker each attempt's STEP_START names
	lostAt  map[attempt]bool    // attempts reported LOST
	lost    int64
	lastSrc int64 // the last src_seq seen, for I5
	summary *eventlog.Record
}

// readLedger gathers the ledger in one pass over the records, checking on
// the way that seq and src_seq run in order (I5) and that every LOST is
// cleaned up before the next attempt (I4).
func readLedger(recs []*eventlog.Record, b *breaches) *ledger {
	l := &ledger{
		final:  map[string][]string{},
		ends:   map[attempt]int{},
		starts: map[attempt]string{},
		lostAt: map[attempt]bool{},
	}
	for i, r := range recs {
		l.checkOrder(i, r, b)
		l.add(r)
		if r.EventType == eventlog.Lost {
			checkCleanedUp(r, recs[i+1:], b)
		}
	}
	return l
}

// checkOrder checks I5 for recs[i]: its seq is i+1, and its src_seq, when
// set, is above the last one.
func (l *ledger) checkOrder(i int, r *eventlog.Record, b *breaches) {
	if r.Seq != int64(i+1) {
		b.add("I5: record %d has seq %d", i+1, r.Seq)
	}
	if r.SrcSeq != 0 {
		if r.SrcSeq <= l.lastSrc {
			b.add("I5: seq %d: src_seq %d after %d", r.Seq, r.SrcSeq, l.lastSrc)
		}
		l.lastSrc = r.SrcSeq
	}
}

// add records what r says of its attempt.
func (l *ledger) add(r *eventlog.Record) {
	k := attempt{r.StepID, r.RetryCount}
	switch r.EventType {
	case eventlog.StepStart:
		l.starts[k] = r.Worker
	case eventlog.StepEnd:
		l.ends[k]++
		if r.Status != eventlog.Running {
			l.final[r.StepID] = append(l.final[r.StepID], r.Status)
		}
	case eventlog.Lost:
		l.lost++
		l.lostAt[k] = true
	case eventlog.TaskSummary:
		l.summary = r
	}
}

// checkCleanedUp checks I4 for the LOST record r, given the records after
// it: a dirty cleanup of its step comes before any later attempt of it is
// dispatched.
func checkCleanedUp(r *eventlog.Record, after []*eventlog.Record, b *breaches) {
	cleaned := false
	for _, q := range after {
		if q.StepID != r.StepID {
			continue
		}
		if q.EventType == eventlog.Cleanup && q.Dirty {
			cleaned = true
		}
		if q.EventType == eventlog.Dispatch && q.RetryCount > r.RetryCount && !cleaned {
			b.add("I4: attempt %d of %s dispatched before the lost attempt's cleanup", q.RetryCount, r.StepID)
		}
	}
	if !cleaned {
		b.add("I4: LOST of %s attempt %d has no cleanup after it", r.StepID, r.RetryCount)
	}
}

// checkEnds checks that each of the steps ended once, in SUCCESS, and the
// summary says so (I1), that no attempt ended twice (I2), and that every
// started attempt was ended or lost (I4).
func (l *ledger) checkEnds(steps int, b *breaches) {
	if len(l.final) != steps {
		b.add("I1: %d steps have a final STEP_END, want %d", len(l.final), steps)
	}
	for id, f := range l.final {
		if len(f) != 1 || f[0] != eventlog.Success {
			b.add("I1: step %s: final ends %v, want one SUCCESS", id, f)
		}
	}
	s := l.summary
	if s == nil || s.Status != eventlog.Success || s.Summary == nil || s.Summary.Counts[eventlog.Success] != steps {
		b.add("I1: the last summary does not say SUCCESS with %d steps", steps)
	}
	for k, n := range l.ends {
		if n > 1 {
			b.add("I2: step %s attempt %d has %d STEP_ENDs", k.step, k.n, n)
		}
	}
	for k := range l.starts {
		if l.ends[k] == 0 && !l.lostAt[k] {
			b.add("I4: step %s attempt %d started and was neither ended nor lost", k.step, k.n)
		}
	}
}

// checkExecutions checks that every execution, a side-effect file
// <step>.<attempt>.<worker> in artifacts, has a STEP_START of that attempt
// naming that worker (I3), and returns how many there were.
func checkExecutions(artifacts string, starts map[attempt]string, b *breaches) int {
	files, _ := filepath.Glob(filepath.Join(artifacts, "*"))
	execs := 0
	for _, f := range files {
		parts := strings.SplitN(filepath.Base(f), ".", 3)
		if len(parts) != 3 {
			continue
		}
		execs++
		var n int
		fmt.Sscan(parts[1], &n)
		if w, ok := starts[attempt{parts[0], n}]; !ok || w != parts[2] {
			b.add("I3: %s attempt %d ran on %s with no STEP_START for it (the log names worker %q)", parts[0], n, parts[2], w)
		}
	}
	return execs
}

// Drained waits until the work queue is empty and pool's consumer awaits
// no acknowledgement: a message a dead worker held goes once it is
// redelivered and reported lost.
func Drained(c *remote.Client, pool string, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	deadline := time.Now().Add(wait)
	for {
		var msgs uint64
		var pending int
		err := c.Do(ctx, "look at the work queue", func(ctx context.Context) error {
			s, err := c.JS.Stream(ctx, remote.StepsStream)
			if err != nil {
				return err
			}
			info, err := s.Info(ctx)
			if err != nil {
				return err
			}
			msgs = info.State.Msgs
			cons, err := c.JS.Consumer(ctx, remote.StepsStream, remote.PoolConsumer(pool))
			if err != nil {
				return err
			}
			ci, err := cons.Info(ctx)
			if err != nil {
				return err
			}
			pending = ci.NumAckPending
			return nil
		})
		if err != nil {
			return err
		}
		if msgs == 0 && pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the work queue holds %d message(s), %d awaiting acknowledgement", msgs, pending)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
