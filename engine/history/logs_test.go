package history_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/engine"
	"apollo/engine/history"
	"apollo/engine/statedir"
	"apollo/engine/usage"
	"apollo/eventlog"
)

func TestFormatRecord(t *testing.T) {
	exit := 1
	tests := []struct {
		rec  eventlog.Record
		want string
	}{
		{eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running,
			Start: &eventlog.StartInfo{TaskName: "demo", Pipeline: "p.yaml", Invocation: 2, PID: 42, Host: "box", Steps: make([]eventlog.StepInfo, 3)}},
			"2026-12-03 08:00:00.000  -                    TASK_START   RUNNING  attempt 0  invocation 2 of demo (p.yaml), 3 steps, pid 42 on box"},
		{eventlog.Record{EventType: eventlog.StepStart, StepID: "fetch", Status: eventlog.Running, RetryCount: 1},
			"2026-12-03 08:00:00.000  fetch                STEP_START   RUNNING  attempt 1"},
		{eventlog.Record{EventType: eventlog.StepEnd, StepID: "fetch", Status: eventlog.Success, DurationMS: 1500},
			"2026-12-03 08:00:00.000  fetch                STEP_END     SUCCESS  attempt 0  in 1.5s"},
		{eventlog.Record{EventType: eventlog.StepEnd, StepID: "fetch", Status: eventlog.Running, DurationMS: 20, NextDelayMS: 2000,
			ErrorMessage: "exit status 1\nline two", ExitCode: &exit},
			"2026-12-03 08:00:00.000  fetch                STEP_END     RUNNING  attempt 0  in 20ms; retry in 2s; error: exit status 1 | line two"},
		{eventlog.Record{EventType: eventlog.StepEnd, StepID: "slow", Status: eventlog.Failed, RetryCount: 2, DurationMS: 60000, TimedOut: true, ErrorMessage: "timed out after 1m"},
			"2026-12-03 08:00:00.000  slow                 STEP_END     FAILED   attempt 2  in 1m0s; timed out; error: timed out after 1m"},
		{eventlog.Record{EventType: eventlog.Cleanup, StepID: "fetch", Status: eventlog.Pending, Dirty: true, Message: "cleanup ok"},
			"2026-12-03 08:00:00.000  fetch                CLEANUP      PENDING  attempt 0  cleanup ok"},
		{eventlog.Record{EventType: eventlog.Marker, StepID: "notify", Status: eventlog.Running, Marker: &eventlog.MarkerInfo{Name: "sent", State: "done"}},
			"2026-12-03 08:00:00.000  notify               MARKER       RUNNING  attempt 0  marker sent done"},
		{eventlog.Record{EventType: eventlog.Warning, Message: "resume_from transform (manual intervention)"},
			"2026-12-03 08:00:00.000  -                    WARNING               attempt 0  resume_from transform (manual intervention)"},
		{eventlog.Record{EventType: eventlog.TaskSummary, Status: eventlog.Failed, DurationMS: 3000, ErrorMessage: "interrupted by a signal",
			Summary: &eventlog.SummaryInfo{Counts: map[string]int{"SUCCESS": 2, "FAILED": 1}, Interrupted: true}},
			"2026-12-03 08:00:00.000  -                    TASK_SUMMARY FAILED   attempt 0  2 SUCCESS, 1 FAILED; interrupted; in 3s; error: interrupted by a signal"},
	}
	for _, tt := range tests {
		tt.rec.Timestamp = eventlog.FormatTime(testEpoch)
		if got := history.FormatRecord(&tt.rec, time.UTC); got != tt.want {
			t.Errorf("history.FormatRecord(%s) =\n%q\nwant\n%q", tt.rec.EventType, got, tt.want)
		}
	}
}

// logsEngine returns an engine over state whose stdout and stderr are
// returned buffers.
func logsEngine(state string) (history.Runs, *syncBuffer, *syncBuffer) {
	out, errOut := &syncBuffer{}, &syncBuffer{}
	return runsOf(engine.Options{StateDir: state, Stdout: out, Stderr: errOut}), out, errOut
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const retryPipeline = `task_name: logs
retry_delay_seconds: 0
steps:
  - id: flaky
    command: echo "try $APOLLO_RETRY_COUNT"; test "$APOLLO_RETRY_COUNT" -ge 1
    retry_policy: fixed
    max_retries: 1
  - id: quiet
    command: "true"
    depends_on: [flaky]
  - id: broken
    command: echo boom; exit 1
    depends_on: [flaky]
  - id: after
    command: echo never
    depends_on: [broken]
`

// TestLogsEvents checks that the events read one line per record.
func TestLogsEvents(t *testing.T) {
	dir := t.TempDir()
	runPipeline(t, dir, retryPipeline, engine.RunOptions{TaskID: "r"}, engine.Options{})
	state := filepath.Join(dir, ".apollo")
	e, out, _ := logsEngine(state)
	if err := e.Logs(t.Context(), "r", history.LogsOptions{Attempt: -1, Location: time.UTC}); err != nil {
		t.Fatal(err)
	}
	path, _ := statedir.Dir{Root: state}.LatestLog("r")
	recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != len(recs) {
		t.Fatalf("Logs printed %d lines for %d records:\n%s", len(lines), len(recs), out)
	}
	for i, r := range recs {
		if want := history.FormatRecord(r, time.UTC); lines[i] != want {
			t.Errorf("line %d = %q, want %q", i+1, lines[i], want)
		}
	}
}

// TestLogsStepOutput checks which attempt's output is printed.
func TestLogsStepOutput(t *testing.T) {
	dir := t.TempDir()
	runPipeline(t, dir, retryPipeline, engine.RunOptions{TaskID: "r"}, engine.Options{})
	state := filepath.Join(dir, ".apollo")
	tests := []struct {
		step    string
		attempt int
		stdout  string
		stderr  string
		err     string
	}{
		{step: "flaky", attempt: -1, stdout: "try 1\n"},
		{step: "flaky", attempt: 0, stdout: "try 0\n"},
		{step: "flaky", attempt: 1, stdout: "try 1\n"},
		{step: "flaky", attempt: 2, err: "has no attempt 2; it has attempt(s) 0, 1"},
		{step: "broken", attempt: -1, stdout: "boom\n"},
		{step: "quiet", attempt: -1, stderr: "attempt 0 of step quiet wrote no output"},
		{step: "after", attempt: -1, err: "step after of task r has not run yet"},
		{step: "brokn", attempt: -1, err: `task r has no step "brokn" (did you mean "broken"?)`},
	}
	for _, tt := range tests {
		e, out, errOut := logsEngine(state)
		err := e.Logs(t.Context(), "r", history.LogsOptions{Step: tt.step, Attempt: tt.attempt})
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("Logs(%s, %d) = %v", tt.step, tt.attempt, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("Logs(%s, %d) = %v, want an error with %q", tt.step, tt.attempt, err, tt.err)
		}
		if got := out.String(); got != tt.stdout {
			t.Errorf("Logs(%s, %d) printed %q, want %q", tt.step, tt.attempt, got, tt.stdout)
		}
		if !strings.Contains(errOut.String(), tt.stderr) {
			t.Errorf("Logs(%s, %d) said %q on stderr, want %q", tt.step, tt.attempt, errOut.String(), tt.stderr)
		}
	}
	e, _, _ := logsEngine(state)
	var nf *statedir.NotFoundError
	if err := e.Logs(t.Context(), "nope", history.LogsOptions{Attempt: -1}); !errors.As(err, &nf) {
		t.Errorf("Logs(nope) = %v, want a NotFoundError", err)
	}
	var ue *usage.Error
	if err := e.Logs(t.Context(), "../x", history.LogsOptions{Attempt: -1}); !errors.As(err, &ue) {
		t.Errorf("Logs(../x) = %v, want a UsageError", err)
	}
}

// waitFor polls cond until it holds, failing the test after 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestLogsFollow follows a live run's events and a step's output until the
// run ends: -f must return by itself, having printed everything.
func TestLogsFollow(t *testing.T) {
	dir := t.TempDir()
	yaml := `task_name: follow
steps:
  - id: first
    command: echo one
  - id: wait
    command: echo before; touch started; while [ ! -f go ]; do sleep 0.01; done; echo after
    depends_on: [first]
  - id: last
    command: echo three
    depends_on: [wait]
`
	ran := make(chan error, 1)
	go func() {
		err, _, _ := runPipeline(t, dir, yaml, engine.RunOptions{TaskID: "f"}, engine.Options{})
		ran <- err
	}()
	waitFor(t, "the step to start", func() bool { _, err := os.Stat(filepath.Join(dir, "started")); return err == nil })

	state := filepath.Join(dir, ".apollo")
	type result struct {
		out string
		err error
	}
	follow := func(step string) <-chan result {
		ch := make(chan result, 1)
		e, out, _ := logsEngine(state)
		go func() {
			err := e.Logs(t.Context(), "f", history.LogsOptions{Step: step, Attempt: -1, Follow: true, Poll: 5 * time.Millisecond})
			ch <- result{out.String(), err}
		}()
		return ch
	}
	events, output := follow(""), follow("wait")
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run = %v", err)
	}
	for name, ch := range map[string]<-chan result{"events": events, "output": output} {
		select {
		case r := <-ch:
			if r.err != nil {
				t.Errorf("%s: Logs -f = %v", name, r.err)
			}
			want := []string{"TASK_START", "STEP_END     SUCCESS  attempt 0", "last ", "TASK_SUMMARY SUCCESS"}
			if name == "output" {
				want = []string{"before\nafter\n"}
			}
			for _, w := range want {
				if !strings.Contains(r.out, w) {
					t.Errorf("%s: Logs -f printed\n%s\nwant it to contain %q", name, r.out, w)
				}
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: Logs -f did not return after the run ended", name)
		}
	}
}

// TestLogsFollowCancel checks that following a run that nobody runs any
// more (cut off) prints what there is and stops when ctx is done.
func TestLogsFollowCancel(t *testing.T) {
	state := t.TempDir()
	writeLog(t, state, "cut", testEpoch.Unix(), testClock(testEpoch), startRec("x"), stepRec(eventlog.StepStart, "x", eventlog.Running, 0))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	e, out, _ := logsEngine(state)
	if err := e.Logs(ctx, "cut", history.LogsOptions{Attempt: -1, Follow: true, Location: time.UTC}); err != nil {
		t.Fatalf("Logs -f = %v", err)
	}
	if got := strings.Count(out.String(), "\n"); got != 2 {
		t.Errorf("Logs -f printed %d lines, want the 2 records:\n%s", got, out)
	}
}

// TestLogsArchived checks that an archived run's events still read, and
// that asking for its outputs says why they are gone.
func TestLogsArchived(t *testing.T) {
	dir := t.TempDir()
	runPipeline(t, dir, retryPipeline, engine.RunOptions{TaskID: "r"}, engine.Options{})
	state := filepath.Join(dir, ".apollo")
	e, before, _ := logsEngine(state)
	if err := e.Logs(t.Context(), "r", history.LogsOptions{Attempt: -1}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.GC(history.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	e, after, _ := logsEngine(state)
	if err := e.Logs(t.Context(), "r", history.LogsOptions{Attempt: -1, Follow: true}); err != nil {
		t.Fatalf("Logs of an archived run = %v", err)
	}
	if after.String() != before.String() {
		t.Errorf("archived run's events =\n%s\nwant\n%s", after, before)
	}
	err := e.Logs(t.Context(), "r", history.LogsOptions{Step: "flaky", Attempt: -1})
	if err == nil || !strings.Contains(err.Error(), "archived by apollo gc") {
		t.Errorf("Logs(archived, flaky) = %v, want an error saying the run was archived", err)
	}
}
