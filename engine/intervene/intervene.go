package intervene

import (
	"errors"
	"fmt"

	"apollo/engine/pipeline"
	"apollo/eventlog"
)

// Request is one intervention: what to do to which step or marker, why, and
// who asks (the record's intervention.by).
type Request struct {
	// Action is eventlog.ActionReset, ActionSkip or ActionClearMarker.
	Action string
	// Target is the step (reset, skip) or the marker (clear_marker).
	Target string
	Why    string
	By     string
}

// Record checks req against st, a task's replayed state, and returns the
// WARNING to append. The step must be one of the task's (with a suggestion
// when it is not), the marker one the log holds, and why must be given.
// hasMarker says whether a marker exists; nil means st.Markers (a recovery
// script also knows the markers it recorded itself).
func Record(st *eventlog.State, hasMarker func(name string) bool, req Request) (*eventlog.Record, error) {
	if req.Why == "" {
		return nil, errors.New("say why: the reason is kept in the log")
	}
	iv := &eventlog.Intervention{Action: req.Action, Why: req.Why, By: req.By}
	var msg, stepID string
	switch req.Action {
	case eventlog.ActionReset, eventlog.ActionSkip:
		if _, known := st.Steps[req.Target]; !known {
			hint := ""
			if m := pipeline.Suggest(req.Target, st.Order); m != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", m)
			}
			return nil, fmt.Errorf("no step %q in task %s%s", req.Target, st.TaskID, hint)
		}
		iv.Steps = []string{req.Target}
		stepID = req.Target
		verb := "reset: the next apollo run runs it again"
		if req.Action == eventlog.ActionSkip {
			verb = "skipped: the next apollo run treats it as SKIPPED"
		}
		msg = fmt.Sprintf("manual intervention by %s: step %q %s (why: %s)", iv.By, req.Target, verb, req.Why)
	case eventlog.ActionClearMarker:
		if hasMarker == nil {
			hasMarker = func(name string) bool { return st.Markers[name] != nil }
		}
		if !hasMarker(req.Target) {
			return nil, fmt.Errorf("no marker %q in task %s", req.Target, st.TaskID)
		}
		iv.Marker = req.Target
		msg = fmt.Sprintf("manual intervention by %s: marker %q cleared: the guarded code may run again (why: %s)", iv.By, req.Target, req.Why)
	default:
		return nil, fmt.Errorf("unknown intervention %q", req.Action)
	}
	return &eventlog.Record{EventType: eventlog.Warning, StepID: stepID, Status: eventlog.Running,
		Message: msg, Intervention: iv}, nil
}

// Append opens the task's log at path, replays it under the log's lock,
// checks req against it and appends the intervention durably. It may run
// while a runner writes the log: the runner takes the record into account
// at its next invocation.
func Append(path, taskID string, req Request) (*eventlog.Record, error) {
	return appendTo(path, taskID, func(st *eventlog.State) (*eventlog.Record, error) { return Record(st, nil, req) })
}

// Note appends an informational WARNING (no intervention: replay ignores
// it) saying what someone did to the run and why, such as asking its
// runner to stop.
func Note(path, taskID, message string) error {
	_, err := appendTo(path, taskID, func(*eventlog.State) (*eventlog.Record, error) {
		return &eventlog.Record{EventType: eventlog.Warning, Status: eventlog.Running, Message: message}, nil
	})
	return err
}

func appendTo(path, taskID string, make func(*eventlog.State) (*eventlog.Record, error)) (*eventlog.Record, error) {
	st := eventlog.NewState(taskID)
	apply := func(r *eventlog.Record) { st.Apply(r) }
	w, err := eventlog.Open(path, eventlog.WriterOptions{TaskID: taskID, Durability: eventlog.Always, OnForeign: apply},
		func(r *eventlog.Record) error {
			apply(r)
			return nil
		})
	if err != nil {
		return nil, err
	}
	rec, err := make(st)
	if err == nil {
		err = w.AppendDurable(rec)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	return rec, nil
}
