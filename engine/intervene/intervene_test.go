package intervene

import (
	"path/filepath"
	"strings"
	"testing"

	"apollo/eventlog"
)

// newLog writes a log of task "t" with steps a and b (a done) and a marker
// "m", and returns its path.
func newLog(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "task_t_1.jsonl")
	first := &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running, Start: &eventlog.StartInfo{Version: 1,
		TaskName: "t", Steps: []eventlog.StepInfo{{ID: "a"}, {ID: "b", DependsOn: []string{"a"}}}}}
	w, err := eventlog.Open(path, eventlog.WriterOptions{TaskID: "t", First: first}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*eventlog.Record{
		{EventType: eventlog.StepEnd, StepID: "a", Status: eventlog.Success},
		{EventType: eventlog.Marker, Status: eventlog.Running, Marker: &eventlog.MarkerInfo{Name: "m", State: eventlog.MarkerDone}},
	} {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestAppend appends each intervention to a real log and checks the record
// and what replay makes of it.
func TestAppend(t *testing.T) {
	tests := []struct {
		req     Request
		message string
		check   func(*eventlog.State) bool
	}{
		{Request{Action: eventlog.ActionReset, Target: "a", Why: "bad input", By: "ann via apollo serve"},
			`manual intervention by ann via apollo serve: step "a" reset: the next apollo run runs it again (why: bad input)`,
			func(st *eventlog.State) bool { return st.Step("a").Status == eventlog.Pending }},
		{Request{Action: eventlog.ActionSkip, Target: "b", Why: "not needed", By: "bob"},
			`manual intervention by bob: step "b" skipped: the next apollo run treats it as SKIPPED (why: not needed)`,
			func(st *eventlog.State) bool { return st.Step("b").Status == eventlog.Skipped }},
		{Request{Action: eventlog.ActionClearMarker, Target: "m", Why: "resend", By: "cy"},
			`manual intervention by cy: marker "m" cleared: the guarded code may run again (why: resend)`,
			func(st *eventlog.State) bool { return st.Markers["m"] == nil }},
	}
	for _, tt := range tests {
		path := newLog(t)
		rec, err := Append(path, "t", tt.req)
		if err != nil {
			t.Fatalf("Append(%+v): %v", tt.req, err)
		}
		if rec.Message != tt.message {
			t.Errorf("message = %q, want %q", rec.Message, tt.message)
		}
		recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: "t"})
		if err != nil {
			t.Fatal(err)
		}
		last := recs[len(recs)-1]
		if last.EventType != eventlog.Warning || last.Intervention == nil || last.Intervention.By != tt.req.By || last.Intervention.Why != tt.req.Why {
			t.Errorf("last record = %+v, want the WARNING with by %q", last, tt.req.By)
		}
		if !tt.check(eventlog.Replay("t", recs)) {
			t.Errorf("%s: replay does not show the change", tt.req.Action)
		}
	}
}

// TestAppendRefuses checks that a bad request writes nothing and says why.
func TestAppendRefuses(t *testing.T) {
	tests := []struct {
		req  Request
		want string
	}{
		{Request{Action: eventlog.ActionReset, Target: "a", By: "x"}, "say why"},
		{Request{Action: eventlog.ActionReset, Target: "bb", Why: "w"}, `no step "bb" in task t`},
		{Request{Action: eventlog.ActionClearMarker, Target: "n", Why: "w"}, `no marker "n" in task t`},
		{Request{Action: "explode", Target: "a", Why: "w"}, `unknown intervention "explode"`},
	}
	for _, tt := range tests {
		path := newLog(t)
		_, err := Append(path, "t", tt.req)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Append(%+v) = %v, want an error holding %q", tt.req, err, tt.want)
		}
		recs, _, _ := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: "t"})
		if len(recs) != 3 {
			t.Errorf("Append(%+v) left %d records, want the 3 there were", tt.req, len(recs))
		}
	}
}

// TestNote checks that a note is a WARNING that replay ignores.
func TestNote(t *testing.T) {
	path := newLog(t)
	if err := Note(path, "t", "stop requested"); err != nil {
		t.Fatal(err)
	}
	recs, _, _ := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: "t"})
	if last := recs[len(recs)-1]; last.EventType != eventlog.Warning || last.Message != "stop requested" || last.Intervention != nil {
		t.Errorf("last record = %+v, want the note", last)
	}
}
