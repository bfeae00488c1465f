package engine

import (
	"fmt"
	"strings"

	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// summarize writes the TASK_SUMMARY, prints the summary and returns the
// run's outcome.
func (r *taskRun) summarize(interrupted bool) error {
	info := &eventlog.SummaryInfo{Counts: map[string]int{}, Interrupted: interrupted}
	left := 0 // steps outside --only or --until
	for _, n := range r.nodes {
		status := n.final
		if status == "" {
			status = eventlog.Pending
			switch {
			case n.left:
				left++
			case n.blocked:
				info.Blocked = append(info.Blocked, n.id())
			}
		}
		info.Counts[status]++
		if status == eventlog.Failed {
			if n.rs.step.Optional {
				info.FailedOptional = append(info.FailedOptional, n.id())
			} else {
				info.Failed = append(info.Failed, n.id())
			}
		}
	}
	complete := !interrupted && len(info.Failed) == 0 &&
		info.Counts[eventlog.Pending] == 0 && info.Counts[eventlog.Running] == 0
	// A run of --only or --until that did what it was asked leaves the task
	// PENDING: neither complete nor failed, for a plain run to go on.
	partial := !complete && !interrupted && len(info.Failed) == 0 && len(info.Blocked) == 0 &&
		left > 0 && info.Counts[eventlog.Pending] == left && info.Counts[eventlog.Running] == 0
	status := eventlog.Failed
	switch {
	case complete:
		status = eventlog.Success
	case partial:
		status = eventlog.Pending
	}
	dur := r.e.opts.Clock.Now().Sub(r.started)
	total, longest := r.w.FsyncTimes()
	info.Fsync = &eventlog.FsyncInfo{Count: r.w.Fsyncs(), TotalUS: total.Microseconds(), MaxUS: longest.Microseconds()}
	rec := &eventlog.Record{EventType: eventlog.TaskSummary, Status: status, DurationMS: dur.Milliseconds(), Summary: info}
	switch {
	case partial:
		rec.Message = fmt.Sprintf("%s done; %d step(s) outside it left as they are: run without it to go on", r.sc.why, left)
	case interrupted:
		rec.ErrorMessage = "interrupted by a signal"
	case !complete:
		rec.ErrorMessage = fmt.Sprintf("%d required step(s) failed, %d blocked", len(info.Failed), len(info.Blocked))
	}
	r.e.crash("summary:before")
	r.settleSLA()
	if err := r.w.AppendDurable(rec); err != nil {
		// The board must not say SUCCESS for a run the log does not end.
		r.rep.Finish(fmt.Sprintf("task %s: its TASK_SUMMARY could not be written (%v); log: %s\n"+
			"run the same command again once the cause is fixed: finished steps are kept.\n", r.t.id, err, r.logPath))
		return err
	}
	r.noteTask(rec)
	r.rep.Finish(r.summaryText(status, info, textfmt.Duration(dur)))
	switch {
	case interrupted:
		return &InterruptedError{TaskID: r.t.id}
	case !complete && !partial:
		return &TaskFailedError{TaskID: r.t.id, Failed: info.Failed, Blocked: info.Blocked}
	}
	return nil
}

func (r *taskRun) summaryText(status string, info *eventlog.SummaryInfo, dur fmt.Stringer) string {
	var b strings.Builder
	word := status
	switch {
	case info.Interrupted:
		word = "INTERRUPTED"
	case status == eventlog.Pending:
		word = "DONE WITH " + r.sc.why
	}
	fmt.Fprintf(&b, "task %s %s in %s: %d succeeded, %d failed, %d skipped, %d not run\n", r.t.id, word, dur,
		info.Counts[eventlog.Success], info.Counts[eventlog.Failed], info.Counts[eventlog.Skipped], info.Counts[eventlog.Pending])
	for _, id := range info.Failed {
		fmt.Fprintf(&b, "  failed:            %s: %s\n", id, textfmt.OneLine(r.mask.String(r.node(id).lastErr), 300))
	}
	for _, id := range info.FailedOptional {
		fmt.Fprintf(&b, "  failed (optional): %s: %s\n", id, textfmt.OneLine(r.mask.String(r.node(id).lastErr), 300))
	}
	if len(info.Blocked) > 0 {
		fmt.Fprintf(&b, "  blocked:           %s\n", strings.Join(info.Blocked, ", "))
	}
	fmt.Fprintf(&b, "log: %s\n", r.logPath)
	switch {
	case info.Interrupted:
		fmt.Fprintf(&b, "run the same command again to resume.\n")
	case status == eventlog.Pending:
		fmt.Fprintf(&b, "the steps outside %s are left as they are; run without it to go on.\n", r.sc.why)
	case status != eventlog.Success:
		fmt.Fprintf(&b, "fix the cause, then run the same command again: finished steps are kept.\n")
	}
	return b.String()
}
