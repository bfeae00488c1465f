package luart

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"
)

// The heap watchdog. gopher-lua has no allocator hook, so a state's memory cannot be measured,
// only the process heap. While any state is open, one goroutine polls the heap every
// pollInterval. The budget is the heap the process had when the first of the open states was
// created (the baseline) plus the sum of the open states' limits; so no state is stopped while
// every state stays within its own limit, and a runaway state is stopped before the process
// holds more than baseline + Σ limits (plus what one allocation or one poll interval adds).
//
// Over budget, the watchdog first makes sure the heap is live data and not garbage: it looks at
// the live heap of the last GC if a GC has finished since a state was last closed, and
// otherwise forces one (at most every forcedGCInterval). If the live heap is still over budget
// it cancels one state with cause ErrMemory: the newest running state whose lifetime saw the
// heap grow by at least its limit; failing that the newest running state; failing that the
// newest. Which state allocated cannot be known, so this is a heuristic that protects the
// states that were already running before the growth began. After a kill it waits for the
// stopped state to be closed (or victimGrace) before it stops another.
//
// The baseline only goes down afterwards (to the live heap of a later GC, when that is lower),
// so a baseline taken amid garbage heals; if the process's own heap grows while states keep
// overlapping, the budget gets stricter.
//
// The watchdog is process-wide, because the heap is: every Runtime's states share it.

const (
	pollInterval     = 5 * time.Millisecond
	forcedGCInterval = 100 * time.Millisecond
	victimGrace      = 2 * time.Second
	idleExit         = time.Second
)

type watchdog struct {
	mu             sync.Mutex
	states         map[*State]struct{}
	seq            uint64
	running        bool
	base           uint64    // heap baseline of the open states
	releasedCycles uint64    // GC cycles finished when a state was last closed
	victim         *State    // stopped by the watchdog and not closed yet
	victimAt       time.Time // when victim was stopped
	lastForcedGC   time.Time // only the watchdog goroutine uses it
	seenCycles     uint64    // GC cycles finished at the last poll; watchdog goroutine only
}

var heapWatch = &watchdog{states: make(map[*State]struct{})}

type heapSample struct {
	objects uint64 // heap bytes in objects, live or not yet swept
	live    uint64 // heap bytes live at the end of the last GC
	cycles  uint64 // GC cycles finished
}

func readHeap() heapSample {
	samples := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(samples)
	var h heapSample
	for i, p := range []*uint64{&h.objects, &h.live, &h.cycles} {
		if samples[i].Value.Kind() == metrics.KindUint64 {
			*p = samples[i].Value.Uint64()
		}
	}
	return h
}

// readCycles returns the number of GC cycles finished: what remove needs, at half the cost of
// readHeap (it runs once per state).
func readCycles() uint64 {
	sample := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() == metrics.KindUint64 {
		return sample[0].Value.Uint64()
	}
	return 0
}

func (w *watchdog) add(s *State) {
	h := readHeap()
	// The live heap of the last GC may predate recent allocations, the object bytes may hold
	// garbage; the smaller is the better guess at the heap before this state.
	now := h.objects
	if h.live > 0 {
		now = min(now, h.live)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.states) == 0 {
		w.base = now
	}
	w.seq++
	s.seq = w.seq
	s.startHeap = now
	w.states[s] = struct{}{}
	if !w.running {
		w.running = true
		go w.loop()
	}
}

func (w *watchdog) remove(s *State) {
	cycles := readCycles()
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.states, s)
	w.releasedCycles = cycles
	if w.victim == s {
		w.victim = nil
	}
}

func (w *watchdog) loop() {
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	var idleSince time.Time
	for now := range t.C {
		if w.poll(now) {
			idleSince = time.Time{}
			continue
		}
		if idleSince.IsZero() {
			idleSince = now
			continue
		}
		if now.Sub(idleSince) < idleExit {
			continue
		}
		w.mu.Lock()
		if len(w.states) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
	}
}

// budget returns the heap budget of the open states; w.mu must be held.
func (w *watchdog) budget() uint64 {
	b := w.base
	for s := range w.states {
		b += uint64(s.limit)
	}
	return b
}

// poll checks the heap once; it reports whether any state is open.
func (w *watchdog) poll(now time.Time) bool {
	w.mu.Lock()
	if len(w.states) == 0 {
		w.mu.Unlock()
		return false
	}
	budget := w.budget()
	waiting := w.victim != nil && now.Sub(w.victimAt) < victimGrace
	released := w.releasedCycles
	w.mu.Unlock()
	if waiting {
		return true
	}
	h := readHeap()
	if h.cycles != w.seenCycles {
		// Lua states hold part of the live heap, so the process without them needs at most
		// that much: a baseline above it was taken amid garbage or memory since freed.
		w.seenCycles = h.cycles
		w.mu.Lock()
		if h.live > 0 && h.live < w.base {
			w.base = h.live
			budget = w.budget()
		}
		w.mu.Unlock()
	}
	if h.objects <= budget {
		return true
	}
	if h.cycles <= released || h.live <= budget {
		if now.Sub(w.lastForcedGC) < forcedGCInterval {
			return true
		}
		runtime.GC()
		w.lastForcedGC = time.Now()
		h = readHeap()
	}

	w.mu.Lock()
	budget = w.budget()
	if h.live <= budget || len(w.states) == 0 {
		w.mu.Unlock()
		return true
	}
	v := w.pickVictim(h.live)
	if v == nil {
		w.mu.Unlock()
		return true
	}
	v.killed = true
	w.victim, w.victimAt = v, time.Now()
	n := len(w.states)
	w.mu.Unlock()
	v.cancel(fmt.Errorf("%w (%s): the process heap holds %s of live data, over the %s budget of the %d open Lua state(s)",
		ErrMemory, mib(v.limit), roundMiB(h.live), roundMiB(budget), n))
	return true
}

// pickVictim chooses the state to stop; w.mu must be held.
func (w *watchdog) pickVictim(live uint64) *State {
	var best *State
	var bestRank [3]uint64
	for s := range w.states {
		if s.killed {
			continue
		}
		var rank [3]uint64
		if s.running.Load() > 0 {
			rank[0] = 1
		}
		if live > s.startHeap && live-s.startHeap >= uint64(s.limit) {
			rank[1] = 1
		}
		rank[2] = s.seq
		if best == nil || rankLess(bestRank, rank) {
			best, bestRank = s, rank
		}
	}
	return best
}

func rankLess(a, b [3]uint64) bool {
	for i := range a {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return false
}

func roundMiB(n uint64) string { return fmt.Sprintf("%d MiB", (n+(1<<19))>>20) }
