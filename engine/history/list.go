package history

import (
	"fmt"
	"io"
	"time"

	"apollo/engine/statedir"
	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// ListOptions are the flags of apollo list.
type ListOptions struct {
	// All adds the runs archived by apollo gc in <state-dir>/archive.
	All bool
}

// RunInfo is one task run (one log) in apollo list.
type RunInfo struct {
	TaskID   string `json:"task_id"`
	TaskName string `json:"task_name"`
	Log      string `json:"log"`
	Archived bool   `json:"archived"`
	// Status is running, succeeded, failed, interrupted, unfinished (cut
	// off: no TASK_SUMMARY and no runner) or corrupt.
	Status      string     `json:"status"`
	PID         int        `json:"pid,omitempty"` // the runner's, when running
	StartedAt   string     `json:"started_at"`    // the first record's timestamp
	LastEvent   string     `json:"last_event"`    // the last record's timestamp
	DurationMS  int64      `json:"duration_ms"`   // time its invocations ran (to now when running)
	Invocations int        `json:"invocations"`
	Steps       StepCounts `json:"steps"`
	Error       string     `json:"error,omitempty"` // why a corrupt log could not be read
}

// StepCounts counts a run's steps by state. Done is SUCCESS plus SKIPPED.
type StepCounts struct {
	Total   int `json:"total"`
	Done    int `json:"done"`
	Failed  int `json:"failed"`
	Running int `json:"running"`
	Pending int `json:"pending"`
}

// List returns every task run in the state directory, newest first.
func (h Runs) List(opts ListOptions) ([]RunInfo, error) {
	files, err := h.Dir.NewestFirst(opts.archive(h.Dir))
	if err != nil {
		return nil, err
	}
	newest := map[string]string{} // task id -> its newest live log
	for _, f := range files {
		if _, ok := newest[f.TaskID]; !ok && !f.Archived {
			newest[f.TaskID] = f.Path
		}
	}
	now := h.now()
	runs := make([]RunInfo, 0, len(files))
	for _, f := range files {
		held, pid := false, 0
		if newest[f.TaskID] == f.Path { // only a task's newest live log can have a runner
			pid, held = eventlog.Holder(h.Dir.Lock(f.TaskID))
		}
		ri := runInfo(f, held, now)
		if held {
			ri.Status, ri.PID = "running", pid
		}
		runs = append(runs, ri)
	}
	return runs, nil
}

// runInfo describes one log from its records. A held log's duration counts
// to now; the caller marks it running.
func runInfo(f statedir.LogFile, held bool, now time.Time) RunInfo {
	ri := RunInfo{TaskID: f.TaskID, Log: f.Path, Archived: f.Archived,
		StartedAt: eventlog.FormatTime(time.Unix(f.Start, 0))}
	if !f.Regular {
		ri.Status, ri.Error = "corrupt", "not a regular file: a log's name on something that is not a log (a folder or a link?)"
		return ri
	}
	s, err := summarizeLog(f.Path, f.TaskID)
	if err != nil {
		ri.Status, ri.Error = "corrupt", err.Error()
		return ri
	}
	return s.info(ri, held, now)
}

// info fills ri, a run's entry, from the summary of its log.
func (s *logSummary) info(ri RunInfo, held bool, now time.Time) RunInfo {
	st := s.state
	if st.StartedAt != "" {
		ri.StartedAt = st.StartedAt
	}
	ri.LastEvent, ri.Invocations = st.LastTimestamp, st.Invocations
	ri.DurationMS = s.duration(held, now).Milliseconds()
	if st.Start != nil {
		ri.TaskName = st.Start.TaskName
		ri.Steps = countSteps(st)
	}
	ri.Status = outcome(st)
	return ri
}

// countSteps counts the steps of the latest TASK_START by state.
func countSteps(st *eventlog.State) StepCounts {
	c := StepCounts{Total: len(st.Start.Steps)}
	for _, si := range st.Start.Steps {
		switch st.Step(si.ID).Status {
		case eventlog.Success, eventlog.Skipped:
			c.Done++
		case eventlog.Failed:
			c.Failed++
		case eventlog.Running:
			c.Running++
		default:
			c.Pending++
		}
	}
	return c
}

// TaskIDs returns the ids of the tasks List would show, each once, in its
// order: from the logs' names alone, without reading them (shell
// completion asks for these on every TAB).
func (h Runs) TaskIDs(opts ListOptions) ([]string, error) {
	return h.Dir.TaskIDs(opts.archive(h.Dir))
}

// archive is the archive folder List reads besides the logs: the state
// folder's with --all, else none ("").
func (o ListOptions) archive(d statedir.Dir) string {
	if o.All {
		return d.Archive()
	}
	return ""
}

// WriteList prints runs as a table for a person, times in loc.
func WriteList(w io.Writer, runs []RunInfo, loc *time.Location) {
	if len(runs) == 0 {
		fmt.Fprintln(w, "no task runs here; start one with apollo run PIPELINE.yaml")
		return
	}
	width := len("TASK")
	for _, r := range runs {
		width = max(width, len(r.TaskID))
	}
	width = min(width, 60)
	fmt.Fprintf(w, "%-*s  %-21s  %-19s  %9s  %7s\n", width, "TASK", "STATUS", "STARTED", "DURATION", "STEPS")
	for _, r := range runs {
		status := r.Status
		if r.Status == "running" {
			status = fmt.Sprintf("running (pid %d)", r.PID)
		}
		started := ""
		if t, err := time.Parse(time.RFC3339Nano, r.StartedAt); err == nil {
			started = t.In(loc).Format("2006-01-02 15:04:05")
		}
		steps := fmt.Sprintf("%d/%d", r.Steps.Done, r.Steps.Total)
		if r.Steps.Failed > 0 {
			steps += fmt.Sprintf(", %d failed", r.Steps.Failed)
		}
		dur := textfmt.Duration(time.Duration(r.DurationMS) * time.Millisecond).String()
		line := fmt.Sprintf("%-*s  %-21s  %-19s  %9s  %7s", width, r.TaskID, status, started, dur, steps)
		if r.Archived {
			line += "  (archived)"
		}
		fmt.Fprintln(w, line)
	}
}

// WriteListJSON prints runs for machines: {"runs": [RunInfo...]}.
func WriteListJSON(w io.Writer, runs []RunInfo) error {
	return textfmt.WriteJSON(w, struct {
		Runs []RunInfo `json:"runs"`
	}{runs})
}

// ListJSONDoc documents list --json's output ({"runs": [RunInfo]}),
// shown by --help and checked against it by TestJSONDocs. Fields marked ?
// are left out when empty.
const ListJSONDoc = `JSON (--json), one object:
  {"runs": [{"task_id", "task_name", "log", "archived": bool,
             "status": "running"|"succeeded"|"failed"|"interrupted"|"unfinished"|"corrupt",
             "pid"? (the runner's), "started_at", "last_event", "duration_ms", "invocations",
             "steps": {"total", "done", "failed", "running", "pending"}, "error"? (corrupt)}]}
  runs are newest first; one entry per log (a task run with --fresh has several).
  duration_ms is the time its invocations ran (to now while running); done counts
  SUCCESS and SKIPPED steps. Times are RFC 3339 UTC.
`
