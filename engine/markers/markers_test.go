package markers

import (
	"path/filepath"
	"testing"

	"apollo/eventlog"
	"apollo/stdlib"
)

// TestBook checks that a book holds the markers its log records, the ones
// it records itself (durably, in the log), and forgets a cleared one.
func TestBook(t *testing.T) {
	path := filepath.Join(t.TempDir(), "task_t_1.jsonl")
	b := New(nil)
	w, err := eventlog.Open(path, eventlog.WriterOptions{TaskID: "t", Create: true,
		First: &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running, Start: &eventlog.StartInfo{Version: eventlog.Version}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.Attach(w, nil)
	if err := b.RecordMarker("load", 0, stdlib.Marker{Name: "charge", State: "pending"}); err != nil {
		t.Fatal(err)
	}
	if err := b.RecordMarker("load", 0, stdlib.Marker{Name: "charge", State: "done", Result: []byte(`"ok"`)}); err != nil {
		t.Fatal(err)
	}
	if m, ok := b.Marker("charge"); !ok || m.State != "done" {
		t.Errorf("Marker(charge) = %+v, %v; want done", m, ok)
	}
	w.Close()

	// A second book replays the log.
	again := New(nil)
	if _, err := eventlog.Read(path, eventlog.ReadOptions{TaskID: "t"}, func(r *eventlog.Record) error {
		again.Observe(r)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if all := again.All(); len(all) != 1 || all[0].Name != "charge" || all[0].State != "done" {
		t.Errorf("replayed markers = %+v, want charge done", all)
	}
	again.Observe(&eventlog.Record{EventType: eventlog.Warning,
		Intervention: &eventlog.Intervention{Action: eventlog.ActionClearMarker, Marker: "charge"}})
	if _, ok := again.Marker("charge"); ok {
		t.Error("a cleared marker is still there")
	}
}
