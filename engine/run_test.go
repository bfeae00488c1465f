package engine

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"apollo/engine/clock"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// runPipeline writes yaml to a temp workspace and runs it in-process.
//
//lint:ignore ST1008 the error first, as the tests read it: err, state, output
func runPipeline(t *testing.T, dir, yaml string, ro RunOptions, opts Options) (error, *eventlog.State, string) {
	t.Helper()
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	opts.StateDir = filepath.Join(dir, ".apollo")
	opts.Workdir = dir
	opts.Stdout = &out
	opts.Progress = ProgressPlain
	opts.KillGrace = 200 * time.Millisecond
	if ro.TaskID == "" {
		ro.TaskID = "t"
	}
	err := New(opts).Run(t.Context(), path, ro)
	logs, _ := filepath.Glob(filepath.Join(opts.StateDir, "logs", "task_"+ro.TaskID+"_*.jsonl"))
	if len(logs) == 0 {
		return err, nil, out.String()
	}
	recs, _, rerr := eventlog.ReadAll(logs[len(logs)-1], eventlog.ReadOptions{TaskID: ro.TaskID})
	if rerr != nil {
		t.Fatalf("log does not read back: %v", rerr)
	}
	return err, eventlog.Replay(ro.TaskID, recs), out.String()
}

// TestReadyRule checks which steps run after failures: a failed required
// step blocks its descendants, a failed optional one does not, and
// independent branches run to the end.
func TestReadyRule(t *testing.T) {
	const yaml = `
task_name: ready
parallelism: 1
steps:
  - id: req_fail
    command: exit 1
  - id: below_req
    command: "true"
    depends_on: [req_fail]
  - id: below_below
    command: "true"
    depends_on: [below_req]
  - id: opt_fail
    command: exit 1
    optional: true
  - id: below_opt
    command: "true"
    depends_on: [opt_fail]
  - id: free
    command: "true"
  - id: join
    command: "true"
    depends_on: [below_opt, free]
`
	err, st, _ := runPipeline(t, t.TempDir(), yaml, RunOptions{}, Options{})
	var tf *TaskFailedError
	if !errors.As(err, &tf) {
		t.Fatalf("Run = %v, want a TaskFailedError", err)
	}
	want := map[string]string{
		"req_fail": eventlog.Failed, "below_req": eventlog.Pending, "below_below": eventlog.Pending,
		"opt_fail": eventlog.Failed, "below_opt": eventlog.Success, "free": eventlog.Success, "join": eventlog.Success,
	}
	for id, w := range want {
		if got := st.Step(id).Status; got != w {
			t.Errorf("step %s: status %s, want %s", id, got, w)
		}
	}
	sum := st.Summary.Summary
	if got := strings.Join(sum.Blocked, ","); got != "below_req,below_below" {
		t.Errorf("blocked = %q, want below_req,below_below", got)
	}
	if got := strings.Join(sum.FailedOptional, ","); got != "opt_fail" {
		t.Errorf("failed_optional = %q, want opt_fail", got)
	}
}

// TestParallelismLimit checks that no more than the limit of steps run at
// once, and that independent steps do overlap.
func TestParallelismLimit(t *testing.T) {
	dir := t.TempDir()
	// Each step holds a file in running/ while it runs, waits (up to 3 s,
	// so that a loaded machine still overlaps them) for another to hold
	// one, and writes how many it saw.
	var b strings.Builder
	b.WriteString("task_name: par\nsteps:\n")
	for i := 0; i < 8; i++ {
		b.WriteString("  - id: s" + string(rune('a'+i)) + "\n")
		b.WriteString(`    command: 'touch running/$APOLLO_STEP_ID; i=0; while [ $(ls running | wc -l) -lt 2 ] && [ $i -lt 30 ]; do sleep 0.1; i=$((i+1)); done; ls running | wc -l >> peaks; sleep 0.1; rm running/$APOLLO_STEP_ID'` + "\n")
	}
	if err := os.Mkdir(filepath.Join(dir, "running"), 0o755); err != nil {
		t.Fatal(err)
	}
	err, _, _ := runPipeline(t, dir, b.String(), RunOptions{Parallel: 3}, Options{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	peaks, _ := os.ReadFile(filepath.Join(dir, "peaks"))
	maxSeen := 0
	for _, l := range strings.Fields(string(peaks)) {
		n := int(l[0] - '0')
		maxSeen = max(maxSeen, n)
	}
	if maxSeen > 3 || maxSeen < 2 {
		t.Errorf("steps saw up to %d running at once, want 2..3 with --parallel 3", maxSeen)
	}
}

// faultFS fails the nth Sync of the log with EIO.
type faultFS struct {
	eventlog.OS
	failAt int64
	syncs  atomic.Int64
}

type faultFile struct {
	*os.File
	fs *faultFS
}

func (f *faultFS) OpenFile(name string, flag int, perm os.FileMode) (eventlog.File, error) {
	file, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	if strings.Contains(name, ".snapshot.json") {
		return file, nil // a snapshot's failure is only a warning: TestIOFaults covers it
	}
	return faultFile{File: file, fs: f}, nil
}

func (f faultFile) Sync() error {
	if f.fs.syncs.Add(1) == f.fs.failAt {
		return syscall.EIO
	}
	return f.File.Sync()
}

// TestFsyncErrorStopsRun fails each fsync of a run in turn: the run stops
// with a WriteError, the log still reads back, and a run after the fault
// clears completes with every step done once.
func TestFsyncErrorStopsRun(t *testing.T) {
	const yaml = `
task_name: faults
steps:
  - id: a
    command: echo a >> a.count
  - id: b
    command: echo b >> b.count
    depends_on: [a]
  - id: c
    command: echo c >> c.count
    depends_on: [b]
`
	for n := int64(1); ; n++ {
		dir := t.TempDir()
		ffs := &faultFS{failAt: n}
		err, _, _ := runPipeline(t, dir, yaml, RunOptions{}, Options{FS: ffs})
		if ffs.syncs.Load() < n {
			if err != nil {
				t.Fatalf("fault %d never hit, yet Run = %v", n, err)
			}
			if n < 5 {
				t.Fatalf("only %d fsyncs in a run of three steps", n-1)
			}
			break
		}
		var we *eventlog.WriteError
		if !errors.As(err, &we) {
			t.Fatalf("fsync %d failed: Run = %v, want a WriteError", n, err)
		}
		if !strings.Contains(err.Error(), "input/output error") || !strings.Contains(err.Error(), "the run stopped") {
			t.Errorf("fsync %d failed: message %q does not say what happened", n, err)
		}
		// The disk is fine again: the run resumes and completes.
		err, st, _ := runPipeline(t, dir, yaml, RunOptions{}, Options{})
		if err != nil {
			t.Fatalf("fsync %d failed, then resume: Run = %v", n, err)
		}
		if !st.Complete() {
			t.Fatalf("fsync %d failed, then resume: task not complete", n)
		}
		for _, s := range []string{"a", "b", "c"} {
			b, _ := os.ReadFile(filepath.Join(dir, s+".count"))
			// At least once; more only if the fault hid the step's end.
			if c := strings.Count(string(b), s); c < 1 || c > 2 {
				t.Errorf("fsync %d failed: step %s ran %d times", n, s, c)
			}
		}
	}
}

// TestBatchSharesFsyncs counts fsyncs under both durabilities. In a chain,
// a STEP_END shares the fsync of the next step's STEP_START under both
// (that fsync comes before the next body runs): always costs no more than
// batch. When a step ends and nothing starts after it (here: a failed
// attempt waits out its retry delay), always fsyncs its STEP_END at once;
// batch leaves it to the retry's STEP_START, so batch needs fewer. Every
// run completes.
func TestBatchSharesFsyncs(t *testing.T) {
	count := func(durability, head, steps string) int64 {
		ffs := &faultFS{failAt: -1}
		yaml := "task_name: dur\ndurability: " + durability + "\n" + head + "steps:\n" + steps
		// The retry delay passes at once on the fake clock.
		err, st, _ := runPipeline(t, t.TempDir(), yaml, RunOptions{Parallel: 1}, Options{FS: ffs, Clock: clock.NewAuto(testEpoch)})
		if err != nil || !st.Complete() {
			t.Fatalf("durability %s: Run = %v", durability, err)
		}
		return ffs.syncs.Load()
	}
	var chain strings.Builder
	for i := 0; i < 20; i++ {
		chain.WriteString("  - id: s" + string(rune('a'+i)) + "\n    command: \"true\"\n")
		if i > 0 {
			chain.WriteString("    depends_on: [s" + string(rune('a'+i-1)) + "]\n")
		}
	}
	if always, batch := count("always", "", chain.String()), count("batch", "", chain.String()); always != batch {
		t.Errorf("chain of 20: fsyncs always %d, batch %d; want the same (each STEP_END rides on the next STEP_START's fsync)", always, batch)
	}
	// Fails twice, then succeeds: two STEP_ENDs after which nothing starts.
	const retried = "  - id: flaky\n    retry_policy: fixed\n    max_retries: 2\n" +
		"    command: echo x >> tries; test $(wc -l < tries) -ge 3\n"
	const head = "retry_delay_seconds: 600\n"
	if always, batch := count("always", head, retried), count("batch", head, retried); always <= batch {
		t.Errorf("two failed attempts waiting out their retry delay: fsyncs always %d, batch %d; want batch fewer (always fsyncs each such STEP_END at once)", always, batch)
	}
}

func TestInterruptRecordsAttempt(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pipeline.yaml")
	os.WriteFile(path, []byte("task_name: intr\nsteps:\n  - id: long\n    command: touch started; sleep 30\n"), 0o644)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		for {
			if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	e := New(Options{StateDir: filepath.Join(dir, ".apollo"), Workdir: dir, Progress: ProgressQuiet, KillGrace: 200 * time.Millisecond})
	err := e.Run(ctx, path, RunOptions{TaskID: "i"})
	var ie *InterruptedError
	if !errors.As(err, &ie) {
		t.Fatalf("Run = %v, want InterruptedError", err)
	}
	log, err := statedir.Dir{Root: filepath.Join(dir, ".apollo")}.LatestLog("i")
	if err != nil {
		t.Fatal(err)
	}
	st, _, err := statedir.Replay(log, "i", nil)
	if err != nil {
		t.Fatal(err)
	}
	if sum := st.Summary; sum == nil || sum.Summary == nil || !sum.Summary.Interrupted || st.Step("long").Status != eventlog.Failed {
		t.Errorf("log: summary %+v, step %s; want an interrupted summary, FAILED", sum, st.Step("long").Status)
	}
}

// testEpoch is the fake clock's start: runs made with it have fixed log
// names and timestamps.
var testEpoch = time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)

// testClock returns a clock that starts at base and moves 1ms at each call,
// so that records are ordered and timestamps fixed for a given sequence of
// calls.
func testClock(base time.Time) clock.Clock {
	var ticks atomic.Int64
	return clock.NowFunc(func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Millisecond) })
}

// TestRetryDelaysOnClock checks exponential backoff through the engine's
// clock: each failed attempt records the delay before the next (base 10s,
// doubled, capped at 25s), and the run waits exactly those delays on the
// clock, without sleeping.
func TestRetryDelaysOnClock(t *testing.T) {
	const yaml = `task_name: backoff
retry_delay_seconds: 10
max_retry_delay_seconds: 25
steps:
  - id: flaky
    retry_policy: exponential
    max_retries: 3
    command: exit 1
`
	clk := clock.NewAuto(testEpoch)
	err, _, _ := runPipeline(t, t.TempDir(), yaml, RunOptions{}, Options{Clock: clk})
	if _, ok := errors.AsType[*TaskFailedError](err); !ok {
		t.Fatalf("Run = %v, want a TaskFailedError", err)
	}
	if got, want := clk.Now().Sub(testEpoch), 55*time.Second; got != want {
		t.Errorf("the clock moved %v, want %v (10s + 20s + 25s)", got, want)
	}
}

// TestSummaryWriteFails: when the TASK_SUMMARY's fsync fails, the run
// returns the write error and what it prints does not claim success.
func TestSummaryWriteFails(t *testing.T) {
	const yaml = "task_name: sum\nsteps:\n  - id: a\n    command: \"true\"\n"
	counter := &faultFS{failAt: -1}
	if err, _, _ := runPipeline(t, t.TempDir(), yaml, RunOptions{}, Options{FS: counter}); err != nil {
		t.Fatal(err)
	}
	ffs := &faultFS{failAt: counter.syncs.Load()} // the last fsync: the summary's
	err, _, out := runPipeline(t, t.TempDir(), yaml, RunOptions{}, Options{FS: ffs})
	if _, ok := errors.AsType[*eventlog.WriteError](err); !ok {
		t.Fatalf("Run = %v, want a WriteError", err)
	}
	if strings.Contains(out, "SUCCESS in") || !strings.Contains(out, "TASK_SUMMARY could not be written") {
		t.Errorf("the run printed:\n%s\nwant no success line, and that its summary could not be written", out)
	}
}

// TestOversizedOutput: a step whose output is over the log's bound fails
// with a clear error, its sibling and the rest of the run go on, and the
// run ends with its summary.
func TestOversizedOutput(t *testing.T) {
	const yaml = `task_name: big
steps:
  - id: big
    lua: return string.rep("x", 2 * 1024 * 1024)
  - id: sibling
    command: "true"
  - id: after
    command: "true"
    depends_on: [sibling]
`
	err, st, _ := runPipeline(t, t.TempDir(), yaml, RunOptions{}, Options{})
	if _, ok := errors.AsType[*TaskFailedError](err); !ok {
		t.Fatalf("Run = %v, want a TaskFailedError", err)
	}
	if got := st.Step("big"); got.Status != eventlog.Failed || !strings.Contains(got.LastError, "at most 1048576 (1 MiB)") {
		t.Errorf("big: %s %q, want FAILED naming the 1 MiB bound", got.Status, got.LastError)
	}
	if st.Step("after").Status != eventlog.Success || st.Summary == nil {
		t.Errorf("after: %s, summary %v; want the run to go on and end with its summary", st.Step("after").Status, st.Summary)
	}
}

// TestLeftoverDaemonsEnded: a process that left its attempt's process
// group (setsid) is ended before the step's next attempt, within one run
// and across a resume; a successful attempt's daemon is left running.
func TestLeftoverDaemonsEnded(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid(1) (util-linux)")
	}
	const yaml = `task_name: daemons
retry_delay_seconds: 0
steps:
  - id: d
    retry_policy: fixed
    max_retries: 1
    command: |
      setsid sh -c 'echo $$ > daemon.$APOLLO_RETRY_COUNT; exec sleep 300' >/dev/null 2>&1 &
      while [ ! -s daemon.$APOLLO_RETRY_COUNT ]; do sleep 0.01; done
      for n in 0 1 2; do
        # alive: its /proc entry is there and it is not a zombie
        if [ $n -lt $APOLLO_RETRY_COUNT ] && [ -r /proc/$(cat daemon.$n)/stat ] && ! sed 's/.*) //' /proc/$(cat daemon.$n)/stat | grep -q '^Z'; then echo "daemon of attempt $n alive"; exit 3; fi
      done
      [ $APOLLO_RETRY_COUNT -ge 2 ]
`
	dir := t.TempDir()
	alive := func(n int) bool {
		b, err := os.ReadFile(filepath.Join(dir, "daemon."+strconv.Itoa(n)))
		if err != nil {
			t.Fatalf("attempt %d started no daemon: %v", n, err)
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		return syscall.Kill(pid, 0) == nil && !zombie(pid)
	}
	t.Cleanup(func() {
		for n := 0; n < 3; n++ {
			if b, err := os.ReadFile(filepath.Join(dir, "daemon."+strconv.Itoa(n))); err == nil {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	// Attempts 0 and 1 fail: the daemon of 0 is ended before attempt 1.
	err, st, _ := runPipeline(t, dir, yaml, RunOptions{}, Options{})
	if err == nil || st.Step("d").LastError == "" || strings.Contains(st.Step("d").LastError, "alive") {
		t.Fatalf("first run = %v, last error %q; want attempt 1 to fail on its own, not find attempt 0's daemon", err, st.Step("d").LastError)
	}
	// The resume ends attempt 1's daemon before attempt 2, which succeeds.
	err, st, _ = runPipeline(t, dir, yaml, RunOptions{}, Options{})
	if err != nil || st.Step("d").Status != eventlog.Success {
		t.Fatalf("resume = %v, step %s %q; want SUCCESS", err, st.Step("d").Status, st.Step("d").LastError)
	}
	if alive(0) || alive(1) {
		t.Errorf("a failed attempt's daemon still runs: attempt 0 %v, attempt 1 %v", alive(0), alive(1))
	}
	if !alive(2) {
		t.Errorf("the successful attempt's daemon was ended; a step may leave one running on purpose")
	}
}

// zombie reports whether pid has exited and waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z'
}

// TestResumeKeepsTaskDate checks that a task named by its id and carried
// on without --var keeps the task_date it began with (an engine caller may
// pass no vars at all), while --fresh takes the clock's date.
func TestResumeKeepsTaskDate(t *testing.T) {
	dir := t.TempDir()
	const yaml = `
task_name: dated
steps:
  - id: a
    command: echo {{task_date}} >> a.txt
  - id: b
    command: echo {{task_date}} >> b.txt; test -e go
    depends_on: [a]
`
	clk := clock.NewFake(time.Date(2026, 12, 7, 1, 0, 0, 0, time.Local))
	err, _, _ := runPipeline(t, dir, yaml, RunOptions{TaskID: "d", Vars: map[string]string{"task_date": "2026-12-06"}}, Options{Clock: clk})
	if err == nil {
		t.Fatal("the first run succeeded; b should have failed")
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err, st, out := runPipeline(t, dir, yaml, RunOptions{TaskID: "d"}, Options{Clock: clk})
	if err != nil {
		t.Fatalf("resume without vars: %v\n%s", err, out)
	}
	if st.Steps["a"].Attempts != 1 || st.Steps["b"].Status != eventlog.Success {
		t.Errorf("a ran %d time(s), b is %s: want a kept and b rerun to SUCCESS", st.Steps["a"].Attempts, st.Steps["b"].Status)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "b.txt"))
	if string(b) != "2026-12-06\n2026-12-06\n" {
		t.Errorf("b.txt = %q: want both attempts rendered with the task's own date", b)
	}
	err, _, out = runPipeline(t, dir, yaml, RunOptions{TaskID: "d", Fresh: true}, Options{Clock: clk})
	if err != nil {
		t.Fatalf("--fresh: %v\n%s", err, out)
	}
	a, _ := os.ReadFile(filepath.Join(dir, "a.txt"))
	if string(a) != "2026-12-06\n2026-12-07\n" {
		t.Errorf("a.txt = %q: want --fresh to take the clock's date", a)
	}
}
