package markers

import (
	"sort"
	"sync"

	"apollo/eventlog"
	"apollo/stdlib"
)

// Book keeps a task's idempotency markers: what the log says, plus
// what this process records as durable MARKER records. The runner, an
// isolated Lua child and apollo script each keep one over their writer.
type Book struct {
	mu      sync.Mutex // never held while appending: the writer calls Observe
	w       *eventlog.Writer
	markers map[string]*eventlog.MarkerInfo
	crash   func(point string) // crash points "marker:<state>", for tests
}

// New returns a book holding markers (which it keeps and changes), or none.
func New(markers map[string]*eventlog.MarkerInfo) *Book {
	if markers == nil {
		markers = map[string]*eventlog.MarkerInfo{}
	}
	return &Book{markers: markers}
}

// Attach makes w the writer RecordMarker appends through; crash, when not
// nil, is called at the crash points "marker:<state>" once a marker is
// durable (tests kill the process there).
func (b *Book) Attach(w *eventlog.Writer, crash func(point string)) {
	b.w, b.crash = w, crash
}

// Observe takes in a record read from the log or appended by another
// process: markers, and interventions that clear them.
func (b *Book) Observe(r *eventlog.Record) {
	b.mu.Lock()
	defer b.mu.Unlock()
	eventlog.ApplyMarker(b.markers, r)
}

// Marker returns the marker of that name.
func (b *Book) Marker(name string) (stdlib.Marker, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m, ok := b.markers[name]
	if !ok {
		return stdlib.Marker{}, false
	}
	return stdlib.Marker{Name: m.Name, State: m.State, Result: m.Result}, true
}

// All lists the markers by name.
func (b *Book) All() []stdlib.Marker {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]stdlib.Marker, 0, len(b.markers))
	for _, m := range b.markers {
		out = append(out, stdlib.Marker{Name: m.Name, State: m.State, Result: m.Result})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RecordMarker appends a durable MARKER record for a step's attempt.
func (b *Book) RecordMarker(step string, retry int, m stdlib.Marker) error {
	rec := &eventlog.Record{EventType: eventlog.Marker, StepID: step, Status: eventlog.Running, RetryCount: retry,
		Marker: &eventlog.MarkerInfo{Name: m.Name, State: m.State, Result: m.Result}}
	if err := b.w.AppendDurable(rec); err != nil {
		return err
	}
	b.Observe(rec)
	if b.crash != nil {
		b.crash("marker:" + m.State) // pending: between the durable marker and the code it guards
	}
	return nil
}
