package hubtest

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"apollo/engine/remote"
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
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	taskOf := strings.TrimPrefix(filepath.Base(log), "task_")
	taskOf = taskOf[:strings.LastIndexByte(taskOf, '_')]
	recs, _, err := eventlog.ReadAll(log, eventlog.ReadOptions{TaskID: taskOf})
	if err != nil {
		return []error{fmt.Errorf("I5: the log does not read back: %w", err)}
	}
	type key struct {
		step string
		n    int
	}
	final := map[string][]string{}
	ends := map[key]int{}
	starts := map[key]string{}
	lostAt := map[key]bool{}
	var lost, lastSrc int64
	var summary *eventlog.Record
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			bad("I5: record %d has seq %d", i+1, r.Seq)
		}
		if r.SrcSeq != 0 {
			if r.SrcSeq <= lastSrc {
				bad("I5: seq %d: src_seq %d after %d", r.Seq, r.SrcSeq, lastSrc)
			}
			lastSrc = r.SrcSeq
		}
		k := key{r.StepID, r.RetryCount}
		switch r.EventType {
		case eventlog.StepStart:
			starts[k] = r.Worker
		case eventlog.StepEnd:
			ends[k]++
			if r.Status != eventlog.Running {
				final[r.StepID] = append(final[r.StepID], r.Status)
			}
		case eventlog.Lost:
			lost++
			lostAt[k] = true
			cleaned := false
			for _, q := range recs[i+1:] {
				if q.StepID != r.StepID {
					continue
				}
				if q.EventType == eventlog.Cleanup && q.Dirty {
					cleaned = true
				}
				if q.EventType == eventlog.Dispatch && q.RetryCount > r.RetryCount && !cleaned {
					bad("I4: attempt %d of %s dispatched before the lost attempt's cleanup", q.RetryCount, r.StepID)
				}
			}
			if !cleaned {
				bad("I4: LOST of %s attempt %d has no cleanup after it", r.StepID, r.RetryCount)
			}
		case eventlog.TaskSummary:
			summary = r
		}
	}
	if len(final) != steps {
		bad("I1: %d steps have a final STEP_END, want %d", len(final), steps)
	}
	for id, f := range final {
		if len(f) != 1 || f[0] != eventlog.Success {
			bad("I1: step %s: final ends %v, want one SUCCESS", id, f)
		}
	}
	if summary == nil || summary.Status != eventlog.Success || summary.Summary == nil || summary.Summary.Counts[eventlog.Success] != steps {
		bad("I1: the last summary does not say SUCCESS with %d steps", steps)
	}
	for k, n := range ends {
		if n > 1 {
			bad("I2: step %s attempt %d has %d STEP_ENDs", k.step, k.n, n)
		}
	}
	for k := range starts {
		if ends[k] == 0 && !lostAt[k] {
			bad("I4: step %s attempt %d started and was neither ended nor lost", k.step, k.n)
		}
	}
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
		if w, ok := starts[key{parts[0], n}]; !ok || w != parts[2] {
			bad("I3: %s attempt %d ran on %s with no STEP_START for it (the log names worker %q)", parts[0], n, parts[2], w)
		}
	}
	if int64(execs) > int64(steps)+lost {
		bad("I7: %d executions for %d steps and %d losses", execs, steps, lost)
	}
	if c != nil {
		if err := Drained(c, remote.DefaultPool, 15*time.Second); err != nil {
			bad("I6: %v", err)
		}
	}
	return errs
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
