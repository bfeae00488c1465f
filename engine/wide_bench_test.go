package engine

import (
	"syscall"
	"testing"
	"time"

	"apollo/engine/pipeline"
)

// BenchmarkWideShell runs 1,000 independent `true` shell steps at
// parallelism 8 (durability always) through the engine in-process and
// reports the wall time per step and the CPU time per step of the engine
// alone (engine-cpu-µs: this process's user+system time, every thread) and
// of the shells it started (shell-cpu-µs: its children's). The engine's
// share is what the scheduler, the log and the held shells' plumbing cost;
// run it with -cpuprofile to see where it goes.
func BenchmarkWideShell(b *testing.B) {
	const steps = 1000
	dir, path := writePipeline(b, pipelineYAML(steps, "flat", pipeline.DurabilityAlways, 8, bodyTrue))
	var took, self, children time.Duration
	for i := 0; b.Loop(); i++ {
		s0, c0 := rusage(b, syscall.RUSAGE_SELF), rusage(b, syscall.RUSAGE_CHILDREN)
		took += benchRun(b, dir, path, i, nil, false)
		self += rusage(b, syscall.RUSAGE_SELF) - s0
		children += rusage(b, syscall.RUSAGE_CHILDREN) - c0
	}
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(b.N*steps) }
	b.ReportMetric(per(took), "µs/step")
	b.ReportMetric(per(self), "engine-cpu-µs/step")
	b.ReportMetric(per(children), "shell-cpu-µs/step")
}

// rusage is the user+system time of who (RUSAGE_SELF or RUSAGE_CHILDREN).
func rusage(b *testing.B, who int) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
