package history_test

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"apollo/engine"
	"apollo/engine/clock"
	"apollo/engine/history"
	"apollo/engine/internal/golden"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// writeLog writes a log of taskID under stateDir by hand, as a runner
// would, with each record stamped by now; it returns the log's path.
func writeLog(t *testing.T, stateDir, taskID string, start int64, now func() time.Time, recs ...*eventlog.Record) string {
	t.Helper()
	lay := statedir.Dir{Root: stateDir}
	if err := os.MkdirAll(lay.Logs(), 0o755); err != nil {
		t.Fatal(err)
	}
	path := lay.Log(taskID, start)
	w, err := eventlog.Open(path, eventlog.WriterOptions{TaskID: taskID, Now: now}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// startRec is a TASK_START naming steps (each depending on the one
// before).
func startRec(steps ...string) *eventlog.Record {
	si := &eventlog.StartInfo{Version: eventlog.Version, TaskName: "crafted", Pipeline: "pipeline.yaml", PID: 1, Host: "h", Invocation: 1}
	for i, s := range steps {
		st := eventlog.StepInfo{ID: s, DefinitionDigest: "sha256:00", DependsOn: []string{}}
		if i > 0 {
			st.DependsOn = []string{steps[i-1]}
		}
		si.Steps = append(si.Steps, st)
	}
	return &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running, Start: si}
}

func stepRec(event, step, status string, retry int) *eventlog.Record {
	return &eventlog.Record{EventType: event, StepID: step, Status: status, RetryCount: retry}
}

func summaryRec(status string, interrupted bool) *eventlog.Record {
	return &eventlog.Record{EventType: eventlog.TaskSummary, Status: status,
		Summary: &eventlog.SummaryInfo{Counts: map[string]int{}, Interrupted: interrupted}}
}

// listFixture fills a state directory with one run of each kind and
// returns the engine options to read it.
func listFixture(t *testing.T) (dir string, opts engine.Options) {
	t.Helper()
	dir = t.TempDir()
	state := filepath.Join(dir, ".apollo")
	now := testClock(testEpoch)
	yaml := "task_name: demo\nparallelism: 1\nsteps:\n  - id: a\n    command: echo a\n  - id: b\n    command: exit 3\n    depends_on: [a]\n    optional: true\n"
	if err, _, _ := runPipeline(t, dir, yaml, engine.RunOptions{TaskID: "ok_2026"}, engine.Options{Clock: clock.NowFunc(now)}); err != nil {
		t.Fatalf("Run ok_2026 = %v", err)
	}
	failing := "task_name: demo\nsteps:\n  - id: a\n    command: exit 1\n  - id: b\n    command: echo b\n    depends_on: [a]\n"
	if err, _, _ := runPipeline(t, dir, failing, engine.RunOptions{TaskID: "bad"}, engine.Options{Clock: clock.NowFunc(testClock(testEpoch.Add(time.Hour)))}); err == nil {
		t.Fatal("Run bad = nil, want a failure")
	}
	at := func(d time.Duration) func() time.Time { return testClock(testEpoch.Add(d)) }
	writeLog(t, state, "cut", testEpoch.Add(2*time.Hour).Unix(), at(2*time.Hour),
		startRec("x", "y"), stepRec(eventlog.StepStart, "x", eventlog.Running, 0))
	writeLog(t, state, "stopped", testEpoch.Add(3*time.Hour).Unix(), at(3*time.Hour),
		startRec("x"), stepRec(eventlog.StepStart, "x", eventlog.Running, 0),
		stepRec(eventlog.StepEnd, "x", eventlog.Failed, 0), summaryRec(eventlog.Failed, true))
	writeLog(t, state, "live", testEpoch.Add(4*time.Hour).Unix(), at(4*time.Hour),
		startRec("x", "y"), stepRec(eventlog.StepStart, "x", eventlog.Running, 0),
		stepRec(eventlog.StepEnd, "x", eventlog.Success, 0), stepRec(eventlog.StepStart, "y", eventlog.Running, 0))
	lock, err := eventlog.LockTask(statedir.Dir{Root: state}.Lock("live"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Unlock() })
	// A damaged middle line: corruption, listed but not read.
	broken := writeLog(t, state, "broken", testEpoch.Add(5*time.Hour).Unix(), at(5*time.Hour),
		startRec("x"), stepRec(eventlog.StepStart, "x", eventlog.Running, 0), stepRec(eventlog.StepEnd, "x", eventlog.Success, 0))
	data, _ := os.ReadFile(broken)
	if err := os.WriteFile(broken, bytes.Replace(data, []byte(`"STEP_START"`), []byte(`"STEP_STARX"`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, engine.Options{StateDir: state, Clock: clock.NowFunc(func() time.Time { return testEpoch.Add(6 * time.Hour) })}
}

// TestList checks the status, steps and order of every kind of run.
func TestList(t *testing.T) {
	_, opts := listFixture(t)
	runs, err := runsOf(opts).List(history.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		task, status  string
		done, total   int
		failed        int
		invocations   int
		pidIsOurs     bool
		hasError      bool
		durationIsPos bool
	}
	var got []row
	for _, r := range runs {
		got = append(got, row{r.TaskID, r.Status, r.Steps.Done, r.Steps.Total, r.Steps.Failed, r.Invocations,
			r.PID == os.Getpid(), r.Error != "", r.DurationMS > 0})
	}
	want := []row{
		{"broken", "corrupt", 0, 0, 0, 0, false, true, false},
		{"live", "running", 1, 2, 0, 1, true, false, true},
		{"stopped", "interrupted", 0, 1, 1, 1, false, false, true},
		{"cut", "unfinished", 0, 2, 0, 1, false, false, true},
		{"bad", "failed", 0, 2, 1, 1, false, false, true},
		{"ok_2026", "succeeded", 1, 2, 1, 1, false, false, true},
	}
	if len(got) != len(want) {
		t.Fatalf("List() = %+v, want %d runs", got, len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("run %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	// A running task's duration counts to now.
	if live := runs[1]; live.DurationMS < (2*time.Hour - 10*time.Second).Milliseconds() {
		t.Errorf("live run's duration = %dms, want about 2h (to now)", live.DurationMS)
	}
	ids, err := runsOf(opts).TaskIDs(history.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(ids, " "), "broken live stopped cut bad ok_2026"; got != want {
		t.Errorf("history.TaskIDs() = %q, want %q", got, want)
	}
}

// TestListTable checks the table a person reads.
func TestListTable(t *testing.T) {
	_, opts := listFixture(t)
	runs, err := runsOf(opts).List(history.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	history.WriteList(&b, runs, time.UTC)
	if !strings.HasPrefix(b.String(), "TASK     STATUS                 STARTED               DURATION    STEPS\n") {
		t.Errorf("history.WriteList() header =\n%s\nwant columns TASK STATUS STARTED DURATION STEPS", b.String())
	}
	// Compare the rows with their spacing squeezed (a pid's width varies).
	got := regexp.MustCompile(`pid \d+`).ReplaceAllString(b.String(), "pid N")
	got = regexp.MustCompile(` +`).ReplaceAllString(got, " ")
	for _, want := range []string{
		"\nlive running (pid N) 2026-12-03 12:00:00 2h0m0s 1/2\n",
		"\nstopped interrupted 2026-12-03 11:00:00 3ms 0/1, 1 failed\n",
		"\nbroken corrupt 2026-12-03 13:00:00 0s 0/0\n",
		"\nok_2026 succeeded 2026-12-03 08:00:00 ",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("history.WriteList() =\n%s\nwant it to contain %q", got, want)
		}
	}
	b.Reset()
	history.WriteList(&b, nil, time.UTC)
	if !strings.Contains(b.String(), "no task runs") {
		t.Errorf("history.WriteList(nil) = %q, want a note that there are none", b.String())
	}
}

// TestListTaskIDWithUnderscores checks that the start is the numeric
// suffix of a log's name, and that a task whose id extends another's is
// its own task.
func TestListTaskIDWithUnderscores(t *testing.T) {
	state := t.TempDir()
	for _, id := range []string{"a", "a_1", "a_1_2"} {
		writeLog(t, state, id, 100, testClock(testEpoch), startRec("x"), summaryRec(eventlog.Success, false))
	}
	runs, err := runsOf(engine.Options{StateDir: state}).List(history.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, r := range runs {
		listed = append(listed, r.TaskID)
	}
	if got, want := strings.Join(listed, " "), "a a_1 a_1_2"; got != want {
		t.Errorf("List's task ids = %q, want %q", got, want)
	}
	ids, err := runsOf(engine.Options{StateDir: state}).TaskIDs(history.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(ids, " "), "a a_1 a_1_2"; got != want {
		t.Errorf("history.TaskIDs = %q, want %q", got, want)
	}
}

// TestListJSON is the golden test of apollo list --json.
func TestListJSON(t *testing.T) {
	dir, opts := listFixture(t)
	e := runsOf(opts)
	if _, err := e.GC(history.GCOptions{OlderThan: 0}); err != nil {
		t.Fatal(err)
	}
	runs, err := e.List(history.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := history.WriteListJSON(&b, runs); err != nil {
		t.Fatal(err)
	}
	golden.JSON(t, "list", b.Bytes(), dir)
}

// TestInspectJSON is the golden test of apollo inspect --json, on a live
// log and on the same log archived by gc.
func TestInspectJSON(t *testing.T) {
	dir, opts := listFixture(t)
	e := runsOf(opts)
	rep, err := e.Inspect("bad")
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := history.WriteReportJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	golden.JSON(t, "inspect", b.Bytes(), dir)

	if _, err := e.GC(history.GCOptions{OlderThan: 0}); err != nil {
		t.Fatal(err)
	}
	rep, err = e.Inspect("bad")
	if err != nil {
		t.Fatalf("Inspect of an archived task: %v", err)
	}
	b.Reset()
	if err := history.WriteReportJSON(&b, rep); err != nil {
		t.Fatal(err)
	}
	golden.JSON(t, "inspect_archived", b.Bytes(), dir)
}
