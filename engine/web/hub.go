package web

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// hub tells the open live pages what changed: runs (the list page wants
// every one, a run page its own) and output folders (an attempt's page).
type hub struct {
	mu   sync.Mutex
	subs map[*sub]struct{}
}

// sub is one open live page. ch is poked when something it watches
// changed; keys collects the runs that did, for the list page.
type sub struct {
	all  bool    // every run
	key  *runKey // one run
	dir  string  // an output folder
	ch   chan struct{}
	mu   sync.Mutex
	keys map[runKey]bool
}

func newHub() *hub { return &hub{subs: map[*sub]struct{}{}} }

func (h *hub) add(s *sub) func() {
	s.ch = make(chan struct{}, 1)
	s.keys = map[runKey]bool{}
	h.mu.Lock()
	h.subs[s] = struct{}{}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.subs, s)
		h.mu.Unlock()
	}
}

// count is the number of open live pages.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

func (s *sub) poke() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// runsChanged tells the pages of these runs (nil: the list pages only,
// after a bulk change) that they changed.
func (h *hub) runsChanged(keys []runKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		switch {
		case s.all:
			s.mu.Lock()
			for _, k := range keys {
				s.keys[k] = true
			}
			s.mu.Unlock()
			s.poke()
		case s.key != nil:
			for _, k := range keys {
				if k == *s.key {
					s.poke()
					break
				}
			}
		}
	}
}

// fileChanged tells the attempt pages of an output folder.
func (h *hub) fileChanged(dir string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.dir == dir {
			s.poke()
		}
	}
}

// takeKeys returns and forgets the runs that changed.
func (s *sub) takeKeys() []runKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]runKey, 0, len(s.keys))
	for k := range s.keys {
		out = append(out, k)
	}
	clear(s.keys)
	return out
}

// coalesce is how long a live page waits after a change for more before it
// sends: a busy run writes many records a second, a page needs few frames.
const coalesce = 150 * time.Millisecond

// stream serves a live page's events: send writes the first event at once
// and then one after each change, until the page goes or send reports it is
// done.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, sb *sub, send func(ev *events) (done bool)) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: pass events on at once
	remove := s.hub.add(sb)
	defer remove()
	ev := &events{w: w}
	if send(ev) || ev.err != nil {
		return
	}
	fl.Flush()
	ping := time.NewTicker(20 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ping.C:
			fmt.Fprint(w, ": ping\n\n")
		case <-sb.ch:
			select {
			case <-time.After(coalesce):
			case <-r.Context().Done():
				return
			}
			if send(ev) || ev.err != nil {
				return
			}
		}
		fl.Flush()
	}
}

// events writes server-sent events.
type events struct {
	w   http.ResponseWriter
	err error
}

// send writes one event whose data is v as JSON (one line: JSON escapes
// newlines).
func (e *events) send(name string, v any) {
	if e.err != nil {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	_, e.err = fmt.Fprintf(e.w, "event: %s\ndata: %s\n\n", name, data)
}
