package engine

import (
	"fmt"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// scaleYAML writes a pipeline of n no-op Lua steps in chains of chain steps
// (chain 1: every step independent). durability batch, parallelism 8.
func scaleYAML(n, chain int) string {
	var b strings.Builder
	b.Grow(n * 64)
	b.WriteString("task_name: scale\nparallelism: 8\ndurability: batch\nsteps:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - id: s%d\n    %s\n", i, bodyNoop)
		if i%chain != 0 {
			fmt.Fprintf(&b, "    depends_on: [s%d]\n", i-1)
		}
	}
	return b.String()
}

// BenchmarkRun100k runs pipelines of 1k, 10k and 100k no-op Lua steps end
// to end through the engine, in-process (durability batch, parallelism 8),
// in two shapes: wide (every step independent) and deep (chains of 100). It
// reports the time per step and, as the baseline it is judged against, its
// ratio to the time per step of the 1k pipeline of the same shape measured
// in the same run: about 1 at every size when scheduling is linear. Memory
// is the peak, sampled during the run, of the Go heap's objects and of the
// memory the runtime holds from the OS (what the process's RSS follows);
// fsyncs/step counts the log's fsyncs (a STEP_START is durable before its
// step runs, and parallel steps share fsyncs).
//
//	go test -run '^$' -bench BenchmarkRun100k -benchtime 1x ./engine/
func BenchmarkRun100k(b *testing.B) {
	for _, shape := range []struct {
		name  string
		chain int
	}{{"wide", 1}, {"deep", 100}} {
		var base float64 // ns/step of the 1k run of this shape
		for _, n := range []int{1_000, 10_000, 100_000} {
			b.Run(fmt.Sprintf("%s/%d", shape.name, n), func(b *testing.B) {
				dir, path := writePipeline(b, scaleYAML(n, shape.chain))
				debug.FreeOSMemory() // what earlier runs left is not this one's peak
				peak := watchPeak()
				var syncs atomic.Int64
				var took time.Duration
				for i := 0; b.Loop(); i++ {
					took += benchRun(b, dir, path, i, countFS{syncs: &syncs}, false)
				}
				heap, held := peak()
				perStep := float64(took.Nanoseconds()) / float64(b.N*n)
				if n == 1_000 {
					base = perStep
				}
				b.ReportMetric(perStep/1000, "µs/step")
				if base > 0 {
					b.ReportMetric(perStep/base, "ratio-to-1k")
				}
				b.ReportMetric(took.Seconds()/float64(b.N), "s/run")
				b.ReportMetric(float64(syncs.Load())/float64(b.N*n), "fsyncs/step")
				b.ReportMetric(float64(heap)/(1<<20), "peak-heap-MB")
				b.ReportMetric(float64(held)/(1<<20), "peak-held-MB")
			})
		}
	}
}

// watchPeak samples, until the returned function is called, the heap's
// objects and the memory the Go runtime holds from the OS (mapped and not
// released), and reports the peak of each.
func watchPeak() func() (heap, held uint64) {
	sample := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
	var peakHeap, peakHeld atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > peakHeap.Load() {
				peakHeap.Store(v)
			}
			if v := sample[1].Value.Uint64() - sample[2].Value.Uint64(); v > peakHeld.Load() {
				peakHeld.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	return func() (uint64, uint64) {
		close(stop)
		<-done
		return peakHeap.Load(), peakHeld.Load()
	}
}
