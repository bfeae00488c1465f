package e2e_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"apollo/eventlog"
)

// orderPipeline is the pipeline of TestCheckerStartOrder's logs: a
// diamond a -> {b, c} -> d, c optional, and e after d, which reads a's
// output without depending on a directly.
const orderPipeline = `task_name: torture
steps:
  - id: a
    command: "true"
  - id: b
    depends_on: [a]
    command: "true"
  - id: c
    depends_on: [a]
    optional: true
    command: "true"
  - id: d
    depends_on: [b, c]
    command: "true"
  - id: e
    depends_on: [d]
    lua: return ctx.outputs.a
`

// TestCheckerStartOrder feeds the torture checker hand-written logs: one
// in which every step waits for its dependencies (one of them failed and
// optional, one taken from the cache), and logs in which a step starts
// before a dependency is satisfied, by depends_on or by an output it
// reads. The checker must report exactly those.
func TestCheckerStartOrder(t *testing.T) {
	graph := func() *eventlog.Record {
		return &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running, Start: &eventlog.StartInfo{
			Version: eventlog.Version, TaskName: "torture", Steps: []eventlog.StepInfo{
				{ID: "a", DependsOn: []string{}}, {ID: "b", DependsOn: []string{"a"}},
				{ID: "c", DependsOn: []string{"a"}, Optional: true}, {ID: "d", DependsOn: []string{"b", "c"}},
				{ID: "e", DependsOn: []string{"d"}}}}}
	}
	start := func(id string, n int) *eventlog.Record {
		return &eventlog.Record{EventType: eventlog.StepStart, StepID: id, RetryCount: n, Status: eventlog.Running}
	}
	end := func(id string, n int, status string) *eventlog.Record {
		return &eventlog.Record{EventType: eventlog.StepEnd, StepID: id, RetryCount: n, Status: status}
	}
	cached := &eventlog.Record{EventType: eventlog.StepEnd, StepID: "b", Status: eventlog.Success, CachedFrom: "torture-1"}
	reset := &eventlog.Record{EventType: eventlog.Warning, Status: eventlog.Running,
		Intervention: &eventlog.Intervention{Action: eventlog.ActionReset, Steps: []string{"a"}}}
	cases := []struct {
		name string
		recs []*eventlog.Record
		want []string
	}{
		{"in order", []*eventlog.Record{graph(), start("a", 0), end("a", 0, eventlog.Success), cached,
			start("c", 0), end("c", 0, eventlog.Failed), start("d", 0), end("d", 0, eventlog.Success),
			start("e", 0), end("e", 0, eventlog.Success)}, nil},
		{"d before b's SUCCESS", []*eventlog.Record{graph(), start("a", 0), end("a", 0, eventlog.Success),
			start("c", 0), end("c", 0, eventlog.Success), start("b", 0), start("d", 0)},
			[]string{"step d started (STEP_START of attempt 0, seq 7) before its dependency b was satisfied: it is RUNNING (STEP_START of attempt 0 at seq 6)"}},
		{"e while the output it reads is reset", []*eventlog.Record{graph(), start("a", 0), end("a", 0, eventlog.Success),
			start("b", 0), end("b", 0, eventlog.Success), start("c", 0), end("c", 0, eventlog.Success),
			start("d", 0), end("d", 0, eventlog.Success), reset, start("e", 0)},
			[]string{"step e started (STEP_START of attempt 0, seq 11) before its dependency a was satisfied: it is PENDING (reopened by the reset WARNING at seq 10)"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writePipeline(t, dir, orderPipeline)
			logs := filepath.Join(dir, ".apollo", "logs")
			if err := os.MkdirAll(logs, 0o755); err != nil {
				t.Fatal(err)
			}
			var b []byte
			for i, r := range tc.recs {
				r.Seq, r.TaskID = int64(i+1), tortureTask
				line, err := eventlog.Encode(r)
				if err != nil {
					t.Fatal(err)
				}
				b = append(b, line...)
			}
			if err := os.WriteFile(filepath.Join(logs, "task_"+tortureTask+"_1.jsonl"), b, 0o644); err != nil {
				t.Fatal(err)
			}
			c := &checker{dir: dir, task: tortureTask}
			c.checkLog()
			if len(c.violations) != len(tc.want) {
				t.Fatalf("%d violation(s), want %d:\n%s", len(c.violations), len(tc.want), strings.Join(c.violations, "\n"))
			}
			for i, v := range c.violations {
				if !strings.Contains(v, tc.want[i]) {
					t.Errorf("violation %q, want ...%s...", v, tc.want[i])
				}
			}
		})
	}
}
