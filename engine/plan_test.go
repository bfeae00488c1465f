package engine

import (
	"bytes"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"apollo/engine/internal/golden"
	"apollo/engine/pipeline"
	"apollo/eventlog"
)

func TestRetryDelay(t *testing.T) {
	p := &pipeline.Pipeline{RetryDelay: 10 * time.Second, MaxRetryDelay: 300 * time.Second}
	uncapped := &pipeline.Pipeline{RetryDelay: time.Second}
	tests := []struct {
		p      *pipeline.Pipeline
		policy string
		k      int
		want   time.Duration
	}{
		{p, pipeline.RetryFixed, 1, 10 * time.Second},
		{p, pipeline.RetryFixed, 7, 10 * time.Second},
		{p, pipeline.RetryExponential, 1, 10 * time.Second},
		{p, pipeline.RetryExponential, 2, 20 * time.Second},
		{p, pipeline.RetryExponential, 3, 40 * time.Second},
		{p, pipeline.RetryExponential, 5, 160 * time.Second},
		{p, pipeline.RetryExponential, 6, 300 * time.Second}, // 320s capped
		{p, pipeline.RetryExponential, 10000, 300 * time.Second},
		{uncapped, pipeline.RetryExponential, 40, maxDelay}, // 2^39 s would overflow nothing, but is absurd
		{uncapped, pipeline.RetryExponential, 10000, maxDelay},
		{&pipeline.Pipeline{}, pipeline.RetryExponential, 50, 0},
	}
	for _, tt := range tests {
		got := retryDelay(tt.p, &pipeline.Step{RetryPolicy: tt.policy}, tt.k)
		if got != tt.want {
			t.Errorf("retryDelay(%v, %s, %d) = %v, want %v", tt.p.RetryDelay, tt.policy, tt.k, got, tt.want)
		}
	}
}

// TestRetryDelayNeverNegative checks the delay for every attempt number up
// to 10,000: never negative, never above the cap, never decreasing.
func TestRetryDelayNeverNegative(t *testing.T) {
	for _, base := range []time.Duration{0, time.Millisecond, time.Second, 1e9 * time.Second} {
		for _, limit := range []time.Duration{0, time.Minute} {
			p := &pipeline.Pipeline{RetryDelay: base, MaxRetryDelay: limit}
			prev := time.Duration(0)
			for k := 1; k <= 10000; k++ {
				d := retryDelay(p, &pipeline.Step{RetryPolicy: pipeline.RetryExponential}, k)
				if d < 0 || d < prev || (limit > 0 && d > limit) || d > maxDelay {
					t.Fatalf("base %v cap %v: retryDelay(k=%d) = %v after %v", base, limit, k, d, prev)
				}
				prev = d
			}
		}
	}
}

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	plain := &pipeline.Step{ID: "s"}
	withCleanup := &pipeline.Step{ID: "s", CleanupCommand: "rm -f x"}
	tests := []struct {
		name       string
		step       *pipeline.Step
		st         eventlog.StepState
		resumeFrom string
		rerun      map[string]bool
		want       string
		wantRetry  int
	}{
		{"never started", plain, eventlog.StepState{Status: eventlog.Pending}, "", nil, ActionRun, 0},
		{"succeeded", plain, eventlog.StepState{Status: eventlog.Success, Attempts: 1}, "", nil, ActionKeep, 1},
		{"skipped", plain, eventlog.StepState{Status: eventlog.Skipped}, "", nil, ActionKeep, 0},
		{"dirty, no hook", plain, eventlog.StepState{Status: eventlog.Running, Dirty: true, Unclean: true, Attempts: 1}, "", nil, ActionCleanRerun, 1},
		{"dirty, crash loop", plain, eventlog.StepState{Status: eventlog.Running, Dirty: true, Unclean: true, Attempts: 4, RetryCount: 3, DirtyRecoveries: 3}, "", nil, ActionCrashLoop, 4},
		{"dirty, below the guard", plain, eventlog.StepState{Status: eventlog.Running, Dirty: true, Unclean: true, Attempts: 3, RetryCount: 2, DirtyRecoveries: 2}, "", nil, ActionCleanRerun, 3},
		{"failed, no hook", plain, eventlog.StepState{Status: eventlog.Failed, Unclean: true, Attempts: 2, RetryCount: 1}, "", nil, ActionRerun, 2},
		{"failed, hook", withCleanup, eventlog.StepState{Status: eventlog.Failed, Unclean: true, Attempts: 1}, "", nil, ActionCleanRerun, 1},
		{"cleanup done, then crash", withCleanup, eventlog.StepState{Status: eventlog.Pending, Attempts: 1}, "", nil, ActionRerun, 1},
		{"resume_from reruns a success", plain, eventlog.StepState{Status: eventlog.Pending, Attempts: 1}, "s", map[string]bool{"s": true}, ActionRerun, 1},
		{"resume_from skips others", plain, eventlog.StepState{Status: eventlog.Failed, Unclean: true, Attempts: 1}, "x", map[string]bool{"x": true}, ActionSkip, 1},
		{"resume_from keeps successes", plain, eventlog.StepState{Status: eventlog.Success, Attempts: 1}, "x", map[string]bool{"x": true}, ActionKeep, 1},
		{"resume_from on a crash loop runs it", plain, eventlog.StepState{Status: eventlog.Running, Dirty: true, Unclean: true, Attempts: 4, DirtyRecoveries: 9}, "s", map[string]bool{"s": true}, ActionCleanRerun, 1},
	}
	for _, tt := range tests {
		st := tt.st
		got := decide(tt.step, &st, scope{why: "resume_from " + tt.resumeFrom, rerun: tt.rerun, skipOthers: tt.resumeFrom != ""}, 3, now)
		if got.Action != tt.want || got.NextRetry != tt.wantRetry {
			t.Errorf("%s: decide = %s (next retry %d), want %s (next retry %d)", tt.name, got.Action, got.NextRetry, tt.want, tt.wantRetry)
		}
	}
}

func TestDecideWaitsWhatRemains(t *testing.T) {
	ended := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	st := eventlog.StepState{Status: eventlog.Running, Unclean: true, Attempts: 1,
		EndedAt: eventlog.FormatTime(ended), NextDelayMS: 60_000}
	for _, tt := range []struct {
		now  time.Time
		want int64
	}{
		{ended.Add(10 * time.Second), 50_000},
		{ended.Add(59 * time.Second), 1_000},
		{ended.Add(2 * time.Minute), 0},
	} {
		got := decide(&pipeline.Step{ID: "s"}, &st, scope{}, 3, tt.now)
		if got.Action != ActionRerun || got.WaitMS != tt.want {
			t.Errorf("at %v: decide = %s wait %dms, want rerun wait %dms", tt.now.Sub(ended), got.Action, got.WaitMS, tt.want)
		}
	}
}

// TestWritePlan checks the lines of a dry run: number, action and id in
// columns, the reason, a wait, and the body of a step that runs.
func TestWritePlan(t *testing.T) {
	pl := &Plan{TaskID: "t", Pipeline: "p.yaml", Log: "l.jsonl", NewLog: true}
	for i := range 1000 {
		pl.Steps = append(pl.Steps, PlanStep{ID: fmt.Sprintf("s%d", i), Action: ActionKeep, Reason: "already SUCCESS"})
	}
	pl.Steps[0] = PlanStep{ID: "fetch", Action: ActionRun, Reason: "not started", Command: "echo a\necho b"}
	pl.Steps[1] = PlanStep{ID: "überlänge_ç", Action: ActionRerun, Reason: "last attempt failed", WaitMS: 1500, Body: "return 1"}
	pl.Steps[2] = PlanStep{ID: "a_step_id_longer_than_twenty", Action: ActionCleanRerun, Reason: "attempt cut off by a crash", Cleanup: "rm x", Body: "uses:notify"}
	var b strings.Builder
	writePlan(&b, pl)
	lines := strings.Split(b.String(), "\n")
	want := []string{
		"dry run of task t (p.yaml): nothing is run or written",
		"log: l.jsonl (new)",
		"  1. run          fetch                not started",
		"       $ echo a | echo b",
		"  2. rerun        überlänge_ç          last attempt failed; waits 1500ms before its retry",
		"       return 1",
		"  3. clean+rerun  a_step_id_longer_than_twenty attempt cut off by a crash",
		"       cleanup: rm x",
		"       uses:notify",
		"  4. keep         s3                   already SUCCESS",
	}
	if got := lines[:len(want)]; !slices.Equal(got, want) {
		t.Errorf("writePlan =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got, want := lines[len(lines)-2], "1000. keep         s999                 already SUCCESS"; got != want {
		t.Errorf("last line = %q, want %q", got, want)
	}
}

func TestInputDigestIgnoresAttemptAndOrder(t *testing.T) {
	rs := &renderedStep{step: &pipeline.Step{ID: "s", Command: "echo hi"}, command: "echo hi",
		env: map[string]string{"A": "1", "B": "2"}}
	a := inputDigest(rs, map[string]string{"x": "sha256:1", "y": "sha256:2"}, "")
	b := inputDigest(rs, map[string]string{"y": "sha256:2", "x": "sha256:1"}, "")
	if a != b {
		t.Errorf("input digest depends on map order: %s vs %s", a, b)
	}
	c := inputDigest(rs, map[string]string{"x": "sha256:1", "y": "sha256:3"}, "")
	if a == c {
		t.Errorf("input digest ignores an upstream output digest")
	}
}

// TestDryRunJSON is the golden test of apollo run --dry-run --json: a task
// with a kept step, a failed one to clean and rerun, and one not started.
func TestDryRunJSON(t *testing.T) {
	dir := t.TempDir()
	yaml := `task_name: plan
vars: {who: world}
steps:
  - id: a
    command: echo hello {{who}}
  - id: b
    command: exit 1
    cleanup_command: rm -f b.tmp
    depends_on: [a]
  - id: c
    lua: return 1
    depends_on: [b]
`
	if err, _, _ := runPipeline(t, dir, yaml, RunOptions{TaskID: "p"}, Options{Clock: testClock(testEpoch)}); err == nil {
		t.Fatal("Run = nil, want a failure")
	}
	var out bytes.Buffer
	e := New(Options{StateDir: filepath.Join(dir, ".apollo"), Workdir: dir, Stdout: &out, Clock: testClock(testEpoch.Add(time.Hour))})
	if err := e.Run(t.Context(), filepath.Join(dir, "pipeline.yaml"), RunOptions{TaskID: "p", DryRun: true, JSON: true}); err != nil {
		t.Fatal(err)
	}
	golden.JSON(t, "dry_run", out.Bytes(), dir)
}
