package luaproc

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"
)

// How a child bounds a job's memory (see the package documentation for the
// measurements behind the choice). limit is the job's limit in bytes; the
// heap's size when the job starts is its base.
//
//   - The heap meter: a timer reads runtime/metrics every
//     sampleInterval (a few hundred nanoseconds, no stop of the world) and
//     suspects the job when the live heap the last collection marked is
//     over base + limit, or when the heap's objects, live or garbage, are
//     over base + limit × hardRatio (one big allocation, or a collection
//     that cannot keep up); it then runs a collection and stops the job
//     (ErrMemoryLimit on its context) if the live heap is still over the
//     limit. The Lua state stops at its next instruction; the child answers
//     and exits.
//   - A Go memory limit (debug.SetMemoryLimit) at limit × goLimitRatio over
//     the runtime's memory at the start: it makes the collector run as the
//     heap nears the limit, so the live figure is fresh and garbage is
//     collected before it counts, and it sits above the meter's threshold
//     so that a heap that only grows is stopped rather than collected back
//     to back below it (the death spiral).
//   - RLIMIT_DATA, the hard bound nothing in the process can raise from
//     Lua: the data segment at the start plus limit × dataRatio plus 64
//     MiB. It is only reached by one allocation the meter cannot see coming
//     (a `..` of two huge strings); that fails in the kernel, the runtime
//     dies with "fatal error: out of memory", and the parent reports the
//     same limit.
type meterConfig struct {
	sample   bool // run the heap meter
	goLimit  bool // set the Go memory limit
	rlimit   bool // set RLIMIT_DATA
	interval time.Duration
	// hardRatio, goLimitRatio and dataRatio are multiples of the limit (see
	// above); a zero hardRatio means the objects threshold is the limit.
	hardRatio, goLimitRatio, dataRatio float64
}

// defaultMeter is what Serve uses.
var defaultMeter = meterConfig{
	sample:       true,
	goLimit:      true,
	rlimit:       true,
	interval:     2 * time.Millisecond,
	hardRatio:    1.5,
	goLimitRatio: 1.25,
	dataRatio:    1.75,
}

// dataSlack is what RLIMIT_DATA allows beyond limit × dataRatio: the
// runtime's own structures, which grow with the heap.
const dataSlack = 64 << 20

// retireGrowth is how much more memory than when it started serving the Go
// runtime may hold after a job for the child to be given another.
const retireGrowth = 64 << 20

// limitDrift is how far the runtime's memory may move, after the Go memory
// limit and RLIMIT_DATA were set for a job, for a later job with the same
// limit to keep them: both are relative to what the process held when they
// were set, which a job that left little behind has not changed.
const limitDrift = 4 << 20

// limits are the Go memory limit and RLIMIT_DATA a process has set, kept
// from one job to the next while they still fit (see set).
type limits struct {
	cfg   meterConfig
	limit uint64 // the limit they were set for; 0: none set
	total uint64 // the runtime's memory when they were set
}

// set makes the process's limits those of a job with a limit of limit
// bytes (0: none). Setting RLIMIT_DATA reads /proc/self/status, which costs
// more than the rest of a small job: the limits set for the job before are
// kept when its limit was the same and the runtime's memory has not moved
// by more than limitDrift since.
func (l *limits) set(limit uint64) {
	total := goMemory()
	if limit == l.limit && (limit == 0 || max(total, l.total)-min(total, l.total) <= limitDrift) {
		return
	}
	if limit == 0 {
		if l.cfg.goLimit {
			debug.SetMemoryLimit(math.MaxInt64)
		}
		if l.cfg.rlimit {
			setDataLimit(math.MaxUint64)
		}
		l.limit = 0
		return
	}
	if l.cfg.goLimit {
		debug.SetMemoryLimit(int64(min(total+scaled(limit, l.cfg.goLimitRatio), math.MaxInt64)))
	}
	if l.cfg.rlimit {
		setDataLimit(scaled(limit, l.cfg.dataRatio) + dataSlack)
	}
	l.limit, l.total = limit, total
}

// scaled is limit × r, r no less than 1.
func scaled(limit uint64, r float64) uint64 { return uint64(float64(limit) * max(r, 1)) }

// meter watches one job while it runs: every interval, until stop, it
// calls gone (the parent is gone: the job is stopped) and, when it
// samples, checks the heap against the job's limit (trip: the job is
// stopped). It is a timer, not a goroutine: a job shorter than interval
// costs a timer set and stopped, and nothing to wake.
type meter struct {
	interval time.Duration
	sample   bool
	live     uint64 // the heap meter's thresholds (see meterConfig)
	hard     uint64
	trip     func()
	gone     func() bool
	left     func()

	mu      sync.Mutex // held while a check runs; stop waits for it
	t       *time.Timer
	check   heapCheck
	stopped bool
	tripped bool
}

// start starts watching the job about to run, bounded to limit bytes (0:
// none, only gone is watched); trip is called (once) when the meter sees
// the heap over it, left (once) when gone reports the parent gone.
func (c meterConfig) start(limit uint64, trip func(), gone func() bool, left func()) *meter {
	m := &meter{interval: c.interval, trip: trip, gone: gone, left: left}
	if m.interval <= 0 {
		m.interval = defaultMeter.interval
	}
	if limit > 0 && c.sample {
		base := heapObjects()
		m.sample, m.live, m.hard = true, base+limit, base+scaled(limit, c.hardRatio)
	}
	if !m.sample && gone == nil {
		return m
	}
	m.mu.Lock()
	m.t = time.AfterFunc(m.interval, m.tick)
	m.mu.Unlock()
	return m
}

// tick is one check, on the timer's goroutine.
func (m *meter) tick() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return
	}
	if m.gone != nil && m.gone() {
		m.left()
		return
	}
	if m.sample && m.check.overLimit(m.live, m.hard) {
		m.tripped = true
		m.trip()
		return
	}
	m.t.Reset(m.interval)
}

// stop ends the meter, once a check that runs has ended, and reports
// whether it stopped the job for its memory.
func (m *meter) stop() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopped = true
	if m.t != nil {
		m.t.Stop()
	}
	return m.tripped
}

// heapCheck is the meter's check of the heap, tick after tick.
type heapCheck struct {
	// cleared is the live heap a confirming collection found within the
	// limit, once what the job allocated during it is taken off.
	cleared uint64
}

// overLimit reports whether the live heap is over live bytes. The figures
// the collector publishes may overstate it: objects over hard bytes may be
// garbage the collector has not caught up with (a loaded machine gives its
// background workers little CPU), and the live heap a cycle marked counts everything
// the job allocated while the cycle ran, garbage or not. Either suspicion
// is confirmed by a collection, less what the job allocated during it, so
// that a job whose live heap stays under its limit is not stopped for its
// garbage, however slow the collection; a job over it is stopped by this
// check or, for what it allocated meanwhile, by the one after the next
// collection. The live figure only changes when a collection ends: one
// that a confirmation cleared is not confirmed again, tick after tick,
// unless the objects grow past hard.
func (c *heapCheck) overLimit(live, hard uint64) bool {
	h := readHeap()
	if h.live <= live && h.objects <= hard {
		return false
	}
	if h.live == c.cleared && h.objects <= hard {
		return false
	}
	runtime.GC()
	after := readHeap()
	during := after.allocs - h.allocs
	if after.live > live+during {
		return true
	}
	c.cleared = after.live
	return false
}

// heap is what the meter reads.
type heap struct{ objects, live, allocs uint64 }

var heapMetrics = [...]string{"/memory/classes/heap/objects:bytes", "/gc/heap/live:bytes", "/gc/heap/allocs:bytes"}

// readHeap returns the bytes of the heap's objects, live or not yet swept,
// of the live heap the last collection marked, and of all the objects ever
// allocated.
func readHeap() heap {
	var s [len(heapMetrics)]metrics.Sample
	for i, name := range heapMetrics {
		s[i].Name = name
	}
	metrics.Read(s[:])
	return heap{objects: uint64Of(s[0]), live: uint64Of(s[1]), allocs: uint64Of(s[2])}
}

// heapObjects returns the bytes of the heap's objects, live or not yet
// swept.
func heapObjects() uint64 { return readMetric(heapMetrics[0]) }

// goMemory returns all the memory the Go runtime has mapped.
func goMemory() uint64 { return readMetric("/memory/classes/total:bytes") }

func readMetric(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return uint64Of(s[0])
}

// uint64Of returns a sample's value, or 0 when it is not a uint64 (a metric this Go does not
// have).
func uint64Of(s metrics.Sample) uint64 {
	if s.Value.Kind() == metrics.KindUint64 {
		return s.Value.Uint64()
	}
	return 0
}
