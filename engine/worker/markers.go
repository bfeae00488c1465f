package worker

import (
	"context"
	"fmt"
	"sync"

	"apollo/engine/executor"
	"apollo/engine/remote"
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
	hub, err := w.o.Client.Markers(ctx, a.work.Pool, a.work.Task)
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
		Pool: work.Pool, Secret: work.Secret, Worker: s.w.id, Marker: &mk, Seq: seq}
	if _, err := s.w.o.Client.Report(ctx, ev); err != nil {
		return fmt.Errorf("marker %q set in the hub, but not reported: %w", m.Name, err)
	}
	return nil
}
