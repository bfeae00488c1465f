package engine

import (
	"fmt"
	"strings"

	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// summarize writes the TASK_SUMMARY, prints the summary and returns the
// run's outcome.
func (r *run) summarize(interrupted bool) error {
	info := &eventlog.SummaryInfo{Counts: map[string]int{}, Interrupted: interrupted}
	for _, n := range r.nodes {
		status := n.final
		if status == "" {
			status = eventlog.Pending
			if n.blocked {
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
	status := eventlog.Failed
	if complete {
		status = eventlog.Success
	}
	dur := r.e.opts.Clock.Now().Sub(r.started)
	total, longest := r.w.FsyncTimes()
	info.Fsync = &eventlog.FsyncInfo{Count: r.w.Fsyncs(), TotalUS: total.Microseconds(), MaxUS: longest.Microseconds()}
	rec := &eventlog.Record{EventType: eventlog.TaskSummary, Status: status, DurationMS: dur.Milliseconds(), Summary: info}
	if interrupted {
		rec.ErrorMessage = "interrupted by a signal"
	} else if !complete {
		rec.ErrorMessage = fmt.Sprintf("%d required step(s) failed, %d blocked", len(info.Failed), len(info.Blocked))
	}
	r.e.crash("summary:before")
	if err := r.w.AppendDurable(rec); err != nil {
		// The board must not say SUCCESS for a run the log does not end.
		r.rep.finish(fmt.Sprintf("task %s: its TASK_SUMMARY could not be written (%v); log: %s\n"+
			"run the same command again once the cause is fixed: finished steps are kept.\n", r.t.id, err, r.logPath))
		return err
	}
	r.rep.finish(r.summaryText(status, info, textfmt.Duration(dur)))
	switch {
	case interrupted:
		return &InterruptedError{TaskID: r.t.id}
	case !complete:
		return &TaskFailedError{TaskID: r.t.id, Failed: info.Failed, Blocked: info.Blocked}
	}
	return nil
}

func (r *run) summaryText(status string, info *eventlog.SummaryInfo, dur fmt.Stringer) string {
	var b strings.Builder
	word := status
	if info.Interrupted {
		word = "INTERRUPTED"
	}
	fmt.Fprintf(&b, "task %s %s in %s: %d succeeded, %d failed, %d skipped, %d not run\n", r.t.id, word, dur,
		info.Counts[eventlog.Success], info.Counts[eventlog.Failed], info.Counts[eventlog.Skipped], info.Counts[eventlog.Pending])
	for _, id := range info.Failed {
		fmt.Fprintf(&b, "  failed:            %s: %s\n", id, textfmt.OneLine(r.byID[id].lastErr, 300))
	}
	for _, id := range info.FailedOptional {
		fmt.Fprintf(&b, "  failed (optional): %s: %s\n", id, textfmt.OneLine(r.byID[id].lastErr, 300))
	}
	if len(info.Blocked) > 0 {
		fmt.Fprintf(&b, "  blocked:           %s\n", strings.Join(info.Blocked, ", "))
	}
	fmt.Fprintf(&b, "log: %s\n", r.logPath)
	switch {
	case info.Interrupted:
		fmt.Fprintf(&b, "run the same command again to resume.\n")
	case status != eventlog.Success:
		fmt.Fprintf(&b, "fix the cause, then run the same command again: finished steps are kept.\n")
	}
	return b.String()
}
