package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"

	"apollo/engine/executor"
	"apollo/engine/remote"
	"apollo/eventlog"
	"apollo/stdlib"
)

// markerStore is the idempotency markers of a remote attempt
// (executor.MarkerStore): the hub's idem bucket first, then what the
// coordinator's log held at dispatch. Recording a marker sets it in the
// bucket — pending only from absent or cleared, a compare-and-set, so
// that two attempts of a step running at once cannot both pass an
// idem.once gate — and reports it, so that the coordinator copies it into
// the log before the attempt's end.
type markerStore struct {
	w        *Worker
	a        *attempt
	ctx      context.Context
	hub      *remote.Markers
	snapshot map[string]remote.Marker
	mu       sync.Mutex
	seq      int
}

func newMarkerStore(ctx context.Context, w *Worker, a *attempt) (*markerStore, error) {
	hub, err := w.o.Client.Markers(ctx, a.work.Task)
	if err != nil {
		return nil, err
	}
	snap := make(map[string]remote.Marker, len(a.work.Markers))
	for _, m := range a.work.Markers {
		snap[m.Name] = m
	}
	return &markerStore{w: w, a: a, ctx: ctx, hub: hub, snapshot: snap}, nil
}

var _ executor.MarkerStore = (*markerStore)(nil)

// Marker returns the marker of that name.
func (s *markerStore) Marker(name string) (stdlib.Marker, bool) {
	m, _, ok, err := s.hub.Get(context.WithoutCancel(s.ctx), name)
	if err != nil || !ok {
		m, ok = s.snapshot[name]
	}
	if !ok {
		return stdlib.Marker{}, false
	}
	return stdlib.Marker{Name: m.Name, State: m.State, Result: m.Result}, true
}

// RecordMarker sets the marker in the hub and reports it; it returns once
// both are stored.
func (s *markerStore) RecordMarker(step string, retry int, m stdlib.Marker) error {
	work := s.a.work
	mk := remote.Marker{Name: m.Name, State: m.State, Result: m.Result, Step: step, Attempt: retry}
	ctx := context.WithoutCancel(s.ctx)
	if err := s.hub.Set(ctx, mk); err != nil {
		return err
	}
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.mu.Unlock()
	ev := &remote.Event{Type: remote.EventMarker, Run: work.Run, Task: work.Task, Step: work.Step, Attempt: work.Attempt,
		Worker: s.w.id, Marker: &mk, Seq: seq}
	if _, err := s.w.o.Client.Report(ctx, ev); err != nil {
		return fmt.Errorf("marker %q set in the hub, but not reported: %w", m.Name, err)
	}
	return nil
}

// scratchLog makes a log of the attempt's own for an isolated Lua child,
// holding the markers it may read, and returns its path.
func (s *markerStore) scratchLog(dir string) (string, error) {
	work := s.a.work
	path := filepath.Join(dir, "markers.jsonl")
	w, err := eventlog.Open(path, eventlog.WriterOptions{TaskID: work.Task, Create: true, Durability: eventlog.Always,
		First: &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running,
			Start: &eventlog.StartInfo{Version: eventlog.Version, TaskName: work.Pipeline.TaskName}}}, nil)
	if err != nil {
		return "", err
	}
	defer w.Close()
	for _, m := range s.snapshot {
		if hm, _, ok, err := s.hub.Get(context.WithoutCancel(s.ctx), m.Name); err == nil && ok {
			m = hm
		}
		rec := &eventlog.Record{EventType: eventlog.Marker, StepID: work.Step, Status: eventlog.Running,
			Marker: &eventlog.MarkerInfo{Name: m.Name, State: m.State, Result: m.Result}}
		if err := w.Append(rec); err != nil {
			return "", err
		}
	}
	return path, nil
}

// isolated runs an isolated Lua attempt in a child apollo process, then
// carries the markers the child recorded to the hub.
type isolated struct {
	inner *executor.Isolated
	mk    *markerStore
	log   string
}

func (x *isolated) Run(ctx context.Context, a *executor.Attempt) executor.Result {
	var before int64
	_, _ = eventlog.Read(x.log, eventlog.ReadOptions{TaskID: a.TaskID}, func(r *eventlog.Record) error {
		before = r.Seq
		return nil
	})
	res := x.inner.Run(ctx, a)
	_, _ = eventlog.Read(x.log, eventlog.ReadOptions{TaskID: a.TaskID}, func(r *eventlog.Record) error {
		if r.Seq > before && r.EventType == eventlog.Marker && r.Marker != nil {
			m := stdlib.Marker{Name: r.Marker.Name, State: r.Marker.State, Result: json.RawMessage(r.Marker.Result)}
			if err := x.mk.RecordMarker(a.StepID, a.RetryCount, m); err != nil && res.Err == nil {
				res.Err = err
			}
		}
		return nil
	})
	return res
}
