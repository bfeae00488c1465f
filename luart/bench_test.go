package luart

import (
	"context"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// BenchmarkNewStateNoop is the cost luart adds per step: a sandboxed state with its context,
// running `return nil` from a cached proto, then closed. In the same iteration it creates and
// closes a gopher-lua state with its default libraries (lua.NewState()), the baseline: ratio is
// the sandboxed state's time over it.
func BenchmarkNewStateNoop(b *testing.B) {
	rt := New(Options{})
	ctx := context.Background()
	if _, err := rt.Compile("bench.lua", "return nil"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var sandboxed, bare time.Duration
	for b.Loop() {
		began := time.Now()
		s, err := rt.NewState(ctx, StateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.DoChunk("bench.lua", "return nil"); err != nil {
			b.Fatal(err)
		}
		s.Close()
		sandboxed += time.Since(began)

		began = time.Now()
		L := lua.NewState()
		L.Close()
		bare += time.Since(began)
	}
	b.ReportMetric(float64(sandboxed.Nanoseconds())/1000/float64(b.N), "state-µs")
	b.ReportMetric(float64(bare.Nanoseconds())/1000/float64(b.N), "bare-state-µs")
	b.ReportMetric(float64(sandboxed)/float64(bare), "ratio")
}

// BenchmarkBareState is the floor: a gopher-lua state with no libraries, closed.
func BenchmarkBareState(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		L := lua.NewState(lua.Options{SkipOpenLibs: true})
		L.Close()
	}
}
