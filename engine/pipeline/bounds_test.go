package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestHugeMatrixIsRefusedSmall checks that a 100×100×100 matrix (a 1.5 KB
// file) is refused before anything is expanded: a validation error with
// its line, costing a few MB at most, where expanding it took over a GB.
func TestHugeMatrixIsRefusedSmall(t *testing.T) {
	var vals []string
	for i := range 100 {
		vals = append(vals, "v"+strings.Repeat("x", i%3)+string(rune('a'+i%26))+strings.Repeat("1", i/26))
	}
	list := "[" + strings.Join(vals, ", ") + "]"
	src := "task_name: big\nsteps:\n  - id: big\n    matrix:\n      a: " + list + "\n      b: " + list + "\n      c: " + list + "\n    command: echo {{item.a}}\n"
	path := filepath.Join(t.TempDir(), "big.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := Load(path, LoadOptions{})
	runtime.ReadMemStats(&after)
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("Load() = %v, %v; want a *pipeline.Error", p, err)
	}
	if pe.Line != 4 || pe.Step != "big" || !strings.Contains(pe.Msg, "matrix makes 1000000 instances, more than max_instances (10000)") {
		t.Errorf("Load() error = %v, want line 4, step big, 1000000 instances over max_instances", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8<<20 {
		t.Errorf("Load() allocated %d bytes, want at most 8 MiB", got)
	}
}

// TestExpandCountsVarsFirst checks that a var's list is counted against
// max_instances before any instance is made.
func TestExpandCountsVarsFirst(t *testing.T) {
	p := &Pipeline{Path: "p.yaml", MaxInstances: 2, Steps: []*Step{
		{ID: "each", Line: 3, Foreach: &Foreach{Var: "regions", Line: 4}},
	}}
	if _, err := p.Expand(map[string]string{"regions": "a,b"}); err != nil {
		t.Fatalf("Expand(2 items) = %v, want nil", err)
	}
	_, err := p.Expand(map[string]string{"regions": "a, b, c"})
	if got, want := errString(err), `p.yaml:4: step "each": foreach makes 3 instances, more than max_instances (2)`; !strings.HasPrefix(got, want) {
		t.Errorf("Expand(3 items) = %q, want it to start %q", got, want)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
