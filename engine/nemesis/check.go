package nemesis

import (
	"bytes"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"apollo/eventlog"
)

// Run is what one task run under faults left behind, for Check.
type Run struct {
	// Task is the task id; Steps the ids of every step of its DAG.
	Task  string
	Steps []string
	// Logs are the local logs of the coordinators that ran, each as it was
	// when its coordinator stopped (killed or not), as raw lines.
	Logs []Log
	// Hub is the task's log as the hub holds it, one record a line, or nil
	// when the hub holds no log: the longest of Logs is then the reference.
	Hub [][]byte
	// Effects are the lines the steps' bodies appended: one per execution.
	Effects []Effect
	// Refs are, by step id, the ancestors whose outputs a step names
	// beyond its depends_on (pipeline.Step.OutputRefs), which the log does
	// not record: dependencies for StartOrder. nil is none.
	Refs map[string][]string
}

// Log is one coordinator's local log.
type Log struct {
	Name  string // which coordinator, for the violation's words
	Lines [][]byte
}

// Effect is one execution of a step's body, as the body wrote it.
type Effect struct {
	Step    string
	Attempt int
	Worker  string
}

// Violation is an invariant a run broke.
type Violation struct {
	Kind   string // one of the Kind* constants
	Detail string
}

func (v Violation) String() string { return v.Kind + ": " + v.Detail }

// The invariants Check asserts, by name.
const (
	KindLog         = "log"          // the reference log does not read back (crc, seq), or ends without its summary
	KindDoneOnce    = "done-once"    // a step is not recorded done exactly once
	KindTwoEnds     = "two-ends"     // an attempt has two STEP_ENDs
	KindFencedEnd   = "fenced-end"   // a STEP_END accepted from an attempt already lost or superseded
	KindEffectGone  = "effect-gone"  // a step recorded done has no effect of its recorded attempt
	KindExtraEffect = "extra-effect" // an effect beyond one per step, of an attempt not recorded lost or cut off
	KindPrefix      = "prefix"       // a coordinator's local log is not a prefix of the reference log
	KindEarlyStart  = "early-start"  // a step started before a dependency of it was satisfied (StartOrder)
	// KindInterrupted: a STEP_END recorded as interrupted. The nemesis
	// interrupts no coordinator (it kills and pauses), so a worker ended
	// the attempt because a coordinator asked that did not own the task.
	KindInterrupted = "interrupted-end"
)

// ParseLines splits a log file's bytes into its complete lines; a last
// line without its newline (a write cut by SIGKILL) is no record.
func ParseLines(b []byte) [][]byte {
	var lines [][]byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		lines = append(lines, b[:i])
		b = b[i+1:]
	}
	return lines
}

// ParseEffects reads an effects file: "<step> <attempt> <worker>" a line.
// A line cut short (its writer killed mid-write) is left out.
func ParseEffects(b []byte) []Effect {
	var out []Effect
	for _, line := range ParseLines(b) {
		f := strings.Fields(string(line))
		if len(f) < 2 {
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		e := Effect{Step: f[0], Attempt: n}
		if len(f) > 2 {
			e.Worker = f[2]
		}
		out = append(out, e)
	}
	return out
}

// attempt is one attempt of a step.
type attempt struct {
	step string
	n    int
}

// Check asserts the invariants of a run under faults and returns each
// breach:
//
//   - the reference log (the hub's, else the longest local one) reads
//     back: every crc right, seq 1..n, and it ends with a TASK_SUMMARY;
//   - every step is recorded done (a final STEP_END SUCCESS) exactly once;
//   - no attempt has two STEP_ENDs;
//   - no STEP_END is accepted from a fenced attempt: one recorded LOST, or
//     superseded by a later attempt's DISPATCH;
//   - every step recorded done has the effect of the attempt recorded
//     done;
//   - every other effect is of an attempt recorded LOST or cut off (a
//     dirty CLEANUP of it), and no attempt ran its body twice;
//   - no STEP_END is recorded as interrupted: nothing interrupts a
//     coordinator here;
//   - no step starts (its DISPATCH or STEP_START) before each of its
//     dependencies is satisfied (StartOrder);
//   - every coordinator's local log is a prefix of the reference log.
func Check(run Run) []Violation {
	var vs []Violation
	add := func(kind, format string, args ...any) {
		vs = append(vs, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...)})
	}
	ref, refName := run.Hub, "the hub's log"
	if ref == nil {
		ref, refName = nil, "no log"
		for _, l := range run.Logs {
			if len(l.Lines) >= len(ref) && len(l.Lines) > 0 {
				ref, refName = l.Lines, l.Name+"'s log"
			}
		}
	}
	recs := make([]*eventlog.Record, 0, len(ref))
	for i, line := range ref {
		r, err := eventlog.Decode(line)
		if err != nil {
			add(KindLog, "%s, line %d: %v", refName, i+1, err)
			return vs
		}
		if r.Seq != int64(i+1) {
			add(KindLog, "%s, line %d: seq %d", refName, i+1, r.Seq)
		}
		recs = append(recs, r)
	}
	if len(recs) == 0 || recs[len(recs)-1].EventType != eventlog.TaskSummary {
		add(KindLog, "%s (%d records) does not end with a TASK_SUMMARY: the run did not finish", refName, len(recs))
	}

	done := map[string][]int{} // the attempts recorded done, by step
	ends := map[attempt]int{}
	endStatus := map[attempt]string{} // an attempt's STEP_END, when it did not succeed
	lost := map[attempt]bool{}
	cutOff := map[attempt]bool{}
	dispatched := map[attempt]bool{}
	latest := map[string]int{} // each step's latest dispatched attempt
	for _, r := range recs {
		k := attempt{r.StepID, r.RetryCount}
		switch r.EventType {
		case eventlog.Dispatch:
			dispatched[k] = true
			if n, ok := latest[r.StepID]; !ok || r.RetryCount > n {
				latest[r.StepID] = r.RetryCount
			}
		case eventlog.Lost:
			lost[k] = true
		case eventlog.Cleanup:
			if r.Dirty {
				cutOff[k] = true
			}
		case eventlog.StepEnd:
			ends[k]++
			if ends[k] == 2 {
				add(KindTwoEnds, "step %s attempt %d has two STEP_ENDs (the second at seq %d)", r.StepID, r.RetryCount, r.Seq)
			}
			switch {
			case lost[k]:
				add(KindFencedEnd, "seq %d: STEP_END of step %s attempt %d, which was recorded LOST before", r.Seq, r.StepID, r.RetryCount)
			case latest[r.StepID] > r.RetryCount:
				add(KindFencedEnd, "seq %d: STEP_END of step %s attempt %d after attempt %d was dispatched", r.Seq, r.StepID, r.RetryCount, latest[r.StepID])
			}
			if r.Status == eventlog.Success {
				done[r.StepID] = append(done[r.StepID], r.RetryCount)
			} else {
				endStatus[k] = r.Status
			}
			if r.Interrupted {
				endStatus[k] = "interrupted"
				add(KindInterrupted, "seq %d: step %s attempt %d recorded interrupted (%s), though no coordinator was interrupted",
					r.Seq, r.StepID, r.RetryCount, r.ErrorMessage)
			}
		}
	}
	vs = append(vs, StartOrder(recs, run.Refs)...)
	for _, s := range run.Steps {
		if n := len(done[s]); n != 1 {
			add(KindDoneOnce, "step %s is recorded done %d times %v", s, n, done[s])
		}
	}

	ran := map[attempt][]string{}
	for _, e := range run.Effects {
		k := attempt{e.Step, e.Attempt}
		ran[k] = append(ran[k], e.Worker)
	}
	for _, s := range run.Steps {
		for _, n := range done[s] {
			if len(ran[attempt{s, n}]) == 0 {
				add(KindEffectGone, "step %s is recorded done by attempt %d, which left no effect", s, n)
			}
		}
	}
	keys := make([]attempt, 0, len(ran))
	for k := range ran {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].step != keys[j].step {
			return keys[i].step < keys[j].step
		}
		return keys[i].n < keys[j].n
	})
	for _, k := range keys {
		workers := ran[k]
		if len(workers) > 1 {
			add(KindExtraEffect, "step %s attempt %d ran its body %d times (workers %v)", k.step, k.n, len(workers), workers)
		}
		if slices.Contains(done[k.step], k.n) || lost[k] || cutOff[k] {
			continue
		}
		why := "neither recorded done, LOST nor cut off"
		if st, ok := endStatus[k]; ok {
			why += " (its STEP_END: " + st + ")"
		}
		if !dispatched[k] {
			why = "never dispatched in the log"
		}
		add(KindExtraEffect, "step %s attempt %d ran (worker %v) but is %s", k.step, k.n, workers, why)
	}

	for _, l := range run.Logs {
		if i, ok := isPrefix(l.Lines, ref); !ok {
			add(KindPrefix, "%s (%d records) is not a prefix of %s (%d records): they differ at line %d", l.Name, len(l.Lines), refName, len(ref), i+1)
		}
	}
	return vs
}

// isPrefix reports whether p is a prefix of full, line for line, and
// where they first differ when not.
func isPrefix(p, full [][]byte) (int, bool) {
	for i, line := range p {
		if i >= len(full) || !bytes.Equal(line, full[i]) {
			return i, false
		}
	}
	return len(p), true
}
