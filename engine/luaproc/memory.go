package luaproc

import (
	"math"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// How a child bounds a job's memory (see the package documentation for the
// measurements behind the choice). limit is the job's limit in bytes; the
// heap's size when the job starts is its base.
//
//   - The heap meter: a goroutine reads runtime/metrics every
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

// meter bounds one job's memory; the zero value of *meter (nil) bounds
// nothing.
type meter struct {
	tripped atomic.Bool
	quit    chan struct{}
	done    chan struct{}
	goLimit bool
}

// start bounds the memory of the job about to run to limit bytes; trip is
// called (once) when the meter sees the heap over it.
func (c meterConfig) start(limit uint64, trip func()) *meter {
	m := &meter{quit: make(chan struct{}), done: make(chan struct{}), goLimit: c.goLimit}
	base, total := heapObjects(), goMemory()
	scaled := func(r float64) uint64 { return uint64(float64(limit) * max(r, 1)) }
	if c.goLimit {
		debug.SetMemoryLimit(int64(min(total+scaled(c.goLimitRatio), math.MaxInt64)))
	}
	if c.rlimit {
		setDataLimit(scaled(c.dataRatio) + dataSlack)
	}
	if !c.sample {
		close(m.done)
		return m
	}
	live, hard := base+limit, base+scaled(c.hardRatio)
	go func() {
		defer close(m.done)
		t := time.NewTicker(c.interval)
		defer t.Stop()
		var check heapCheck
		for {
			select {
			case <-m.quit:
				return
			case <-t.C:
			}
			if check.overLimit(live, hard) {
				m.tripped.Store(true)
				trip()
				return
			}
		}
	}()
	return m
}

// stop ends the meter and reports whether it stopped the job.
func (m *meter) stop() bool {
	if m == nil {
		return false
	}
	close(m.quit)
	<-m.done
	if m.goLimit {
		debug.SetMemoryLimit(math.MaxInt64)
	}
	return m.tripped.Load()
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
