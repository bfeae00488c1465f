package history

import (
	"time"

	"apollo/engine/statedir"
	"apollo/eventlog"
)

// Summary is a run's entry in apollo list built record by record, for a
// reader that follows a log as it grows (apollo serve): Apply each record
// read, in order, then Info gives what List would.
type Summary struct {
	f   statedir.LogFile
	s   logSummary
	err error
}

// NewSummary starts the summary of the log f, with no record read yet.
func NewSummary(f statedir.LogFile) *Summary {
	return &Summary{f: f, s: logSummary{state: eventlog.NewState(f.TaskID)}}
}

// Apply takes in the next record of the log.
func (s *Summary) Apply(r *eventlog.Record) {
	s.s.apply(r)
	s.s.state.Apply(r)
}

// Fail marks the log as one that cannot be read (corrupt), with why.
func (s *Summary) Fail(err error) { s.err = err }

// State is the replayed state of the records applied so far.
func (s *Summary) State() *eventlog.State { return s.s.state }

// Records is the number of records applied.
func (s *Summary) Records() int { return s.s.records }

// Info is the run's entry as List gives it: held (with the runner's pid)
// when a runner holds its task, durations counted to now while it runs.
func (s *Summary) Info(held bool, pid int, now time.Time) RunInfo {
	ri := RunInfo{TaskID: s.f.TaskID, Log: s.f.Path, Archived: s.f.Archived,
		StartedAt: eventlog.FormatTime(time.Unix(s.f.Start, 0))}
	switch {
	case !s.f.Regular:
		ri.Status, ri.Error = "corrupt", "not a regular file: a log's name on something that is not a log (a folder or a link?)"
		return ri
	case s.err != nil:
		ri.Status, ri.Error = "corrupt", s.err.Error()
		return ri
	}
	ri = s.s.info(ri, held, now)
	if held {
		ri.Status, ri.PID = "running", pid
	}
	return ri
}

// NewReport is Inspect's report on a log already replayed into state
// (records of them read, torn bytes after them), with what is known of its
// runner.
func NewReport(state *eventlog.State, log string, records int, torn int64, runner RunnerInfo) *Report {
	rep := report(state, log, records, torn)
	rep.Runner = &runner
	if runner.Held {
		rep.Status = "running"
	}
	return rep
}
