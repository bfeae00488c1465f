package history

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/engine/textfmt"
	"apollo/engine/usage"
	"apollo/eventlog"
)

// Report is what inspect tells about a task, from its log alone.
type Report struct {
	TaskID      string         `json:"task_id"`
	TaskName    string         `json:"task_name"`
	Log         string         `json:"log"`
	Pipeline    string         `json:"pipeline"`
	Status      string         `json:"status"` // complete, failed, interrupted, running, unfinished
	Runner      *RunnerInfo    `json:"runner"`
	Invocations int            `json:"invocations"`
	StartedAt   string         `json:"started_at"`
	LastEvent   string         `json:"last_event"`
	Steps       []ReportStep   `json:"steps"`
	Next        []string       `json:"next"`
	Markers     []ReportMarker `json:"markers"`
	// Notifications are the task's notifications (docs/spec.md §2.13), in
	// the order they were recorded; SLAMissed says an SLA_MISSED is in the log.
	Notifications []ReportNotification `json:"notifications,omitempty"`
	SLAMissed     bool                 `json:"sla_missed,omitempty"`
	TornBytes     int64                `json:"torn_tail_bytes,omitempty"`
	Archived      bool                 `json:"archived,omitempty"` // the log was compressed by apollo gc
	Records       int                  `json:"records"`
}

// RunnerInfo says whether a runner holds the task now.
type RunnerInfo struct {
	Held bool `json:"held"`
	PID  int  `json:"pid,omitempty"`
}

// ReportStep is one step in a Report.
type ReportStep struct {
	ID            string   `json:"id"`
	Status        string   `json:"status"`
	Attempts      int      `json:"attempts"`
	RetryCount    int      `json:"retry_count"`
	Dirty         bool     `json:"dirty"`
	Optional      bool     `json:"optional"`
	DependsOn     []string `json:"depends_on"`
	LastTimestamp string   `json:"last_timestamp"`
	DurationMS    int64    `json:"duration_ms"`
	LastError     string   `json:"last_error"`
	OutputDigest  string   `json:"output_digest,omitempty"`
	// Child is the report on the sub-pipeline task a run: step runs, once
	// its log exists.
	Child *Report `json:"child,omitempty"`
	// CachedFrom names the task run whose result the step took from the
	// cache.
	CachedFrom string `json:"cached_from,omitempty"`
	// Note is what the step's last end said besides its error: "cached
	// from …", "expanded into N instance(s)", ….
	Note string `json:"note,omitempty"`
	// Handler is the handler list the step belongs to ("on_failure",
	// "finally"), "" for a step of steps:. Handlers come after the steps.
	Handler string `json:"handler,omitempty"`
}

// HandlerLists are the handler lists in the order they run, each with what
// triggers it, as inspect, serve and graph label them.
var HandlerLists = []struct{ Name, Trigger string }{
	{pipeline.HandlerOnFailure, "run when the task failed, once every step has settled"},
	{pipeline.HandlerFinally, "always run, once every step has settled"},
}

// handlerRank orders steps (0), then on_failure, then finally handlers.
func handlerRank(h string) int {
	for i, l := range HandlerLists {
		if l.Name == h {
			return i + 1
		}
	}
	return 0
}

// ReportMarker is one idempotency marker in a Report.
type ReportMarker struct {
	Name  string `json:"name"`
	State string `json:"state"`
}

// ReportNotification is one notification in a Report: its last record.
type ReportNotification struct {
	ID     string `json:"id"`
	Event  string `json:"event"`
	Target string `json:"target"`
	Step   string `json:"step,omitempty"`
	// State is sending (cut off: the next run sends it again), sent or
	// failed.
	State string `json:"state"`
	Error string `json:"error,omitempty"`
}

// Inspect reports on a task, named by its id (its newest log in the state
// folder, live or archived) or by a log file's path.
func (h Runs) Inspect(target string) (*Report, error) {
	return h.inspect(target, 0)
}

// maxChildDepth bounds how deep inspect follows sub-pipelines: validation
// refuses cycles, but logs may come from anywhere.
const maxChildDepth = 32

func (h Runs) inspect(target string, depth int) (*Report, error) {
	logPath, taskID, err := h.findTarget(target)
	if err != nil {
		return nil, err
	}
	// A log given by its path names the state folder it lies in.
	dir := h.Dir
	if logPath == target {
		dir = statedir.Dir{Root: filepath.Dir(filepath.Dir(target))}
	}
	return inspectLog(logPath, taskID, dir, depth)
}

// inspectLog reports on the log at logPath, of the state folder dir, and
// on the logs of its sub-pipeline tasks found there.
func inspectLog(logPath, taskID string, dir statedir.Dir, depth int) (*Report, error) {
	n := 0
	state, tail, err := statedir.Replay(logPath, taskID, func(*eventlog.Record) { n++ })
	if err != nil {
		return nil, err
	}
	pid, held := eventlog.Holder(dir.Lock(state.TaskID))
	rep := report(state, logPath, n, tail.Torn)
	rep.Runner = &RunnerInfo{Held: held, PID: pid}
	if held {
		rep.Status = "running"
	}
	if depth < maxChildDepth {
		children := map[string]string{} // a run: step's child task, as TASK_START names it
		if state.Start != nil {
			for _, si := range state.Start.Steps {
				if si.Child != "" {
					children[si.ID] = si.Child
				}
			}
		}
		for i := range rep.Steps {
			rs := &rep.Steps[i]
			p, id := childLog(dir, state.Step(rs.ID), children[rs.ID])
			if p == "" {
				continue
			}
			if rs.Child, err = inspectLog(p, id, dir, depth+1); err != nil {
				return nil, fmt.Errorf("sub-pipeline task %s of step %s: %w", id, rs.ID, err)
			}
		}
	}
	return rep, nil
}

// childLog finds the log of the sub-pipeline task of step st and that
// task's id: the log its latest attempt named (STEP_START child_log), live
// or archived to the state folder's archive; "" while that attempt has not
// made it yet. A log written before attempts named theirs leaves the
// newest log of task childID, the task TASK_START names.
func childLog(dir statedir.Dir, st *eventlog.StepState, childID string) (path, taskID string) {
	if id, _, _, ok := statedir.ParseLogName(st.ChildLog); ok {
		for _, p := range []string{filepath.Join(dir.Logs(), st.ChildLog), filepath.Join(dir.Archive(), statedir.ArchiveName(st.ChildLog))} {
			if _, err := os.Stat(p); err == nil {
				return p, id
			}
		}
		return "", ""
	}
	if childID == "" {
		return "", ""
	}
	if path, _, err := dir.FindLog(childID); err == nil && path != "" {
		return path, childID
	}
	return "", ""
}

// findTarget resolves what inspect was given: a log file (its task id read
// from its name, "" when the name is not a log's), or a task id (its newest
// log, live else archived).
func (h Runs) findTarget(target string) (logPath, taskID string, err error) {
	if fi, err := os.Stat(target); err == nil && !fi.IsDir() && (strings.HasSuffix(target, ".jsonl") || statedir.IsArchive(target)) {
		id, _, _, ok := statedir.ParseLogName(filepath.Base(target))
		if !ok {
			id = ""
		}
		return target, id, nil
	}
	if err := statedir.ValidTaskID(target); err != nil {
		return "", "", usage.Errorf("%q is neither a log file nor a task id: %v", target, err)
	}
	p, _, err := h.Dir.FindLog(target)
	if err != nil {
		return "", "", err
	}
	if p == "" {
		return "", "", &statedir.NotFoundError{TaskID: target, StateDir: h.Dir.Root, LogFile: true,
			Suggestion: pipeline.Suggest(target, h.Dir.KnownTasks())}
	}
	return p, target, nil
}

// report describes a replayed log: its steps in the graph's order, the
// steps a run would start next, its markers and how it ended.
func report(state *eventlog.State, logPath string, records int, torn int64) *Report {
	rep := &Report{TaskID: state.TaskID, Log: logPath, Invocations: state.Invocations, StartedAt: state.StartedAt,
		LastEvent: state.LastTimestamp, TornBytes: torn, Records: records, Markers: []ReportMarker{}, Next: []string{},
		Archived: statedir.IsArchive(logPath), Runner: &RunnerInfo{}}
	graph := map[string]eventlog.StepInfo{}
	var order []string
	if state.Start != nil {
		rep.TaskName, rep.Pipeline = state.Start.TaskName, state.Start.Pipeline
		for _, si := range state.Start.Steps {
			graph[si.ID] = si
			order = append(order, si.ID)
		}
	}
	for _, id := range state.Order {
		if _, ok := graph[id]; !ok {
			if tmpl, _, isInstance := strings.Cut(id, "["); isInstance {
				// An instance made as the run went (foreach over an
				// output) is in its template's list.
				if si, ok := graph[tmpl]; ok && si.Handler != "" {
					graph[id] = eventlog.StepInfo{ID: id, Optional: si.Optional, Handler: si.Handler}
				}
			}
			order = append(order, id)
		}
	}
	// The steps first, then the handlers, list by list.
	slices.SortStableFunc(order, func(a, b string) int { return handlerRank(graph[a].Handler) - handlerRank(graph[b].Handler) })
	for _, id := range order {
		st := state.Step(id)
		si := graph[id]
		deps := si.DependsOn
		if deps == nil {
			deps = []string{}
		}
		rep.Steps = append(rep.Steps, ReportStep{ID: id, Status: st.Status, Attempts: st.Attempts, RetryCount: st.RetryCount,
			Dirty: st.Dirty, Optional: si.Optional, DependsOn: deps, LastTimestamp: st.LastTimestamp,
			DurationMS: st.DurationMS, LastError: st.LastError, OutputDigest: st.OutputDigest, CachedFrom: st.CachedFrom, Note: st.Note,
			Handler: si.Handler})
	}
	rep.Next = nextRunnable(state, graph, order)
	names := slices.Sorted(maps.Keys(state.Markers))
	for _, name := range names {
		rep.Markers = append(rep.Markers, ReportMarker{Name: name, State: state.Markers[name].State})
	}
	rep.SLAMissed = state.SLAMissed
	notes := slices.Collect(maps.Values(state.Notifications))
	slices.SortFunc(notes, func(a, b *eventlog.Record) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, r := range notes {
		st := map[string]string{eventlog.NotifySending: "sending", eventlog.NotifySent: "sent", eventlog.NotifyFailed: "failed"}[r.EventType]
		rep.Notifications = append(rep.Notifications, ReportNotification{ID: r.Notify.ID, Event: r.Notify.Event,
			Target: r.Notify.Target, Step: r.StepID, State: st, Error: r.ErrorMessage})
	}
	switch {
	case state.Complete():
		rep.Status = "complete"
	case state.Summary != nil && state.Summary.Summary != nil && state.Summary.Summary.Interrupted:
		rep.Status = "interrupted"
	case state.Summary != nil && state.Summary.Status != eventlog.Pending:
		rep.Status = "failed"
	default:
		rep.Status = "unfinished"
	}
	return rep
}

// nextRunnable lists the steps a run would start first: not yet done, with
// every dependency satisfied. Handlers run once every step has settled:
// they come next only when no step is left to run, and on_failure ones
// only when a required step failed.
func nextRunnable(state *eventlog.State, graph map[string]eventlog.StepInfo, order []string) []string {
	if state.Complete() {
		return []string{}
	}
	satisfied := func(id string) bool {
		st := state.Step(id)
		switch st.Status {
		case eventlog.Success, eventlog.Skipped:
			return true
		case eventlog.Failed:
			return graph[id].Optional
		}
		return false
	}
	next := []string{}
	stepsLeft, failed := false, false
	for _, id := range order {
		st := state.Step(id)
		if graph[id].Handler == "" {
			stepsLeft = stepsLeft || (st.Status != eventlog.Success && st.Status != eventlog.Skipped)
			failed = failed || (st.Status == eventlog.Failed && !graph[id].Optional)
		}
	}
	for _, id := range order {
		st := state.Step(id)
		if st.Status == eventlog.Success || st.Status == eventlog.Skipped {
			continue
		}
		switch h := graph[id].Handler; {
		case h != "" && stepsLeft:
			continue
		case h == pipeline.HandlerOnFailure && !failed:
			continue
		}
		ok := true
		for _, d := range graph[id].DependsOn {
			if !satisfied(d) {
				ok = false
				break
			}
		}
		if ok {
			next = append(next, id)
		}
	}
	return next
}

// WriteReport prints a report for a person.
func WriteReport(w io.Writer, rep *Report, now time.Time) {
	fmt.Fprintf(w, "task %s (%s): %s\n", rep.TaskID, rep.TaskName, rep.Status)
	archived := ""
	if rep.Archived {
		archived = ", archived by apollo gc"
	}
	fmt.Fprintf(w, "log:      %s (%d records, %d invocation(s)%s)\n", rep.Log, rep.Records, rep.Invocations, archived)
	if rep.Pipeline != "" {
		fmt.Fprintf(w, "pipeline: %s\n", rep.Pipeline)
	}
	if rep.Runner.Held {
		fmt.Fprintf(w, "runner:   apollo process %d holds the task now\n", rep.Runner.PID)
	} else {
		fmt.Fprintf(w, "runner:   none\n")
	}
	if rep.TornBytes > 0 {
		fmt.Fprintf(w, "note:     ignored a %d-byte torn tail (a write cut off by a crash); the next run will cut it and keep the bytes aside\n", rep.TornBytes)
	}
	fmt.Fprintf(w, "\n%-24s %-8s %8s  %-20s %9s  %s\n", "STEP", "STATE", "ATTEMPTS", "LAST EVENT", "DURATION", "LAST ERROR")
	writeSteps(w, rep.Steps, "")
	if len(rep.Next) > 0 {
		fmt.Fprintf(w, "\nnext runnable: %s\n", strings.Join(rep.Next, ", "))
	}
	if len(rep.Markers) > 0 {
		fmt.Fprintf(w, "\nmarkers:\n")
		for _, m := range rep.Markers {
			fmt.Fprintf(w, "  %-30s %s\n", m.Name, m.State)
		}
	}
	if rep.SLAMissed {
		fmt.Fprintf(w, "\nsla missed (SLA_MISSED in the log)\n")
	}
	if len(rep.Notifications) > 0 {
		fmt.Fprintf(w, "\nnotifications:\n")
		for _, n := range rep.Notifications {
			line := fmt.Sprintf("  %-8s %-11s %-30s %s", n.State, n.Event, n.Target, n.ID)
			if n.Error != "" {
				line += "  " + textfmt.OneLine(n.Error, 200)
			}
			fmt.Fprintln(w, line)
		}
	}
}

// writeSteps prints the rows of steps, each sub-pipeline's steps under its
// run: step, indented by a level more, and the handlers after them, under
// a line naming their list and what triggers it.
func writeSteps(w io.Writer, steps []ReportStep, indent string) {
	list := ""
	for _, s := range steps {
		if s.Handler != list {
			list = s.Handler
			for _, l := range HandlerLists {
				if l.Name == list {
					fmt.Fprintf(w, "%s%s handlers (%s):\n", indent, l.Name, l.Trigger)
				}
			}
		}
		state := s.Status
		if s.Dirty {
			state = "DIRTY"
		}
		last := ""
		if t, err := time.Parse(time.RFC3339Nano, s.LastTimestamp); err == nil {
			last = t.Local().Format("2006-01-02 15:04:05")
		}
		dur := ""
		if s.DurationMS > 0 || s.Status == eventlog.Success {
			dur = textfmt.Duration(time.Duration(s.DurationMS) * time.Millisecond).String()
		}
		note := textfmt.OneLine(s.LastError, 100)
		if s.CachedFrom != "" {
			note = "cached from " + s.CachedFrom
		}
		fmt.Fprintf(w, "%-24s %-8s %8d  %-20s %9s  %s\n", indent+s.ID, state, s.Attempts, last, dur, note)
		if c := s.Child; c != nil {
			fmt.Fprintf(w, "%s  task %s (%s): %s, log %s\n", indent, c.TaskID, c.TaskName, c.Status, c.Log)
			writeSteps(w, c.Steps, indent+"  ")
		}
	}
}

// WriteReportJSON prints a report for machines.
func WriteReportJSON(w io.Writer, rep *Report) error { return textfmt.WriteJSON(w, rep) }

// ReportJSONDoc documents inspect --json's output (Report), shown by
// --help and checked against it by TestJSONDocs. Fields marked ? are left
// out when empty.
const ReportJSONDoc = `JSON (--json), one object:
  {"task_id", "task_name", "log", "pipeline",
   "status": "complete"|"failed"|"interrupted"|"running"|"unfinished",
   "runner": {"held": bool, "pid"?}, "invocations", "started_at", "last_event",
   "steps": [{"id", "status", "attempts", "retry_count", "dirty": bool, "optional": bool,
              "depends_on": [ids], "last_timestamp", "duration_ms", "last_error", "output_digest"?,
              "cached_from"? (the task run whose result it took from the cache),
              "note"? (what its last end said besides its error: "expanded into N instance(s)", ...),
              "handler"? ("on_failure"|"finally": a handler, listed after the steps),
              "child"? (a run step's sub-pipeline task: its report, this object)}],
   "next": [step ids a run would start first; handlers once no step is left], "markers": [{"name", "state"}],
   "notifications"?: [{"id", "event", "target", "step"?, "state": "sending"|"sent"|"failed", "error"?}],
   "sla_missed"?: bool,
   "torn_tail_bytes"?, "archived"? (true: read from apollo gc's archive), "records"}
  Times are RFC 3339 UTC.
`
