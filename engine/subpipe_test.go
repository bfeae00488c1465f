package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"apollo/engine/intervene"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// TestChildLog checks which log of its sub-pipeline task an attempt of a
// run: step runs: a new one for a fresh attempt, named after the parent's
// log and the child's earlier ones; else the one its previous attempt
// named; else, for a log that names none (an older apollo's), the child's
// newest unless it began before the parent's log.
func TestChildLog(t *testing.T) {
	dir := statedir.Dir{Root: t.TempDir()}
	if err := os.MkdirAll(dir.Logs(), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, start := range []int64{100, 200} {
		if err := os.WriteFile(dir.Log("p.s", start), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tk := &task{dir: dir}
	now := time.Unix(150, 0)
	base := func(p string) string { return filepath.Base(p) }
	tests := []struct {
		name      string
		fresh     bool
		recorded  string
		parentLog int64
		want      string
	}{
		{"fresh: after the newest child log", true, "", 150, "task_p.s_201.jsonl"},
		{"fresh: not before the parent's log", true, "", 300, "task_p.s_300.jsonl"},
		{"resumed: the log its attempt named", false, "task_p.s_100.jsonl", 50, "task_p.s_100.jsonl"},
		{"resumed: a named log not made yet", false, "task_p.s_250.jsonl", 50, "task_p.s_250.jsonl"},
		{"no name: the newest, begun with the parent", false, "", 150, "task_p.s_200.jsonl"},
		{"no name: the newest is an earlier run's", false, "", 250, "task_p.s_250.jsonl"},
	}
	for _, tt := range tests {
		got := tk.childLog("p.s", tt.fresh, tt.recorded, dir.Log("p", tt.parentLog), now)
		if base(got) != tt.want || filepath.Dir(got) != dir.Logs() {
			t.Errorf("%s: childLog = %s, want %s in %s", tt.name, got, tt.want, dir.Logs())
		}
	}
}

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
