package luart

import (
	"context"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// BenchmarkNewStateNoop is the cost luart adds per step: a sandboxed state with its context,
// running `return nil` from a cached proto, then closed. Judge it against BenchmarkBareState.
func BenchmarkNewStateNoop(b *testing.B) {
	rt := New(Options{})
	ctx := context.Background()
	if _, err := rt.Compile("bench.lua", "return nil"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s, err := rt.NewState(ctx, StateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.DoChunk("bench.lua", "return nil"); err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkBareState is the baseline: a gopher-lua state with no libraries, closed.
func BenchmarkBareState(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		L := lua.NewState(lua.Options{SkipOpenLibs: true})
		L.Close()
	}
}
