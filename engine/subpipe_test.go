package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"apollo/engine/intervene"
	"apollo/eventlog"
)

// TestForeachChildRerun checks that a reset of an instance of a foreach
// over an output (its node made from the template's recorded expansion)
// starts its sub-pipeline anew, rather than resuming the earlier complete
// child and reusing its outputs.
func TestForeachChildRerun(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	child := "task_name: child\nsteps:\n  - id: count\n    command: echo x >> count.txt\n"
	if err := os.WriteFile(filepath.Join(dir, "sub", "child.yaml"), []byte(child), 0o644); err != nil {
		t.Fatal(err)
	}
	const yaml = `
task_name: parent
steps:
  - id: list
    lua: return {"a"}
  - id: each
    foreach: {output: list}
    run: sub/child.yaml
    depends_on: [list]
`
	for i := range 2 {
		if i == 1 {
			logs, _ := filepath.Glob(filepath.Join(dir, ".apollo", "logs", "task_t_*.jsonl"))
			if len(logs) == 0 {
				t.Fatal("no log")
			}
			req := intervene.Request{Action: eventlog.ActionReset, Target: "each[a]", Why: "test", By: "test"}
			if _, err := intervene.Append(logs[len(logs)-1], "t", req); err != nil {
				t.Fatal(err)
			}
		}
		err, _, out := runPipeline(t, dir, yaml, RunOptions{}, Options{})
		if err != nil {
			t.Fatalf("run %d: %v\n%s", i, err, out)
		}
		b, err := os.ReadFile(filepath.Join(dir, "count.txt"))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(b), "x"); got != i+1 {
			t.Fatalf("after run %d the child's step ran %d time(s), want %d\n%s", i, got, i+1, out)
		}
	}
}
