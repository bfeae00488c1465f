package e2e_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/eventlog"
)

// This file checks the log under concurrent writers: a runner's parallel
// Lua steps (one writer) and `apollo script` processes appending to the same
// log under its flock, and a second runner of the same task.

const (
	concMarkers = 8
	concLoops   = 2 // apollo script processes running at the same time
)

// concSize is how many parallel Lua steps a round runs, and how many
// invocations of apollo script each loop makes: 64 and 12; -short, where
// they took 17 s, 16 and 4.
func concSize() (steps, scripts int) {
	if testing.Short() {
		return 16, 4
	}
	return 64, 12
}

// concurrencyPipeline has steps parallel Lua steps, each recording
// concMarkers idem.once markers and an idem.write file once the file "go"
// exists, and a step "hold" that keeps the runner (and its writer) alive
// until the file "release" exists.
func concurrencyPipeline(steps int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task_name: conc\nparallelism: %d\nsteps:\n", steps+1)
	for i := range steps {
		fmt.Fprintf(&b, `  - id: s%02d
    timeout_seconds: 120
    allow: [exec]
    lua: |
      local idem, exec = require("apollo.idem"), require("apollo.exec")
      exec.run({"sh", "-c", "while [ ! -e go ]; do sleep 0.01; done"})
      for i = 1, %d do
        idem.once(ctx.step_id .. "_m" .. i, function() return i end)
      end
      idem.write("out/" .. ctx.step_id .. ".txt", ctx.step_id)
`, i, concMarkers)
	}
	b.WriteString(`  - id: hold
    timeout_seconds: 120
    command: while [ ! -e release ]; do sleep 0.01; done
`)
	return b.String()
}

// recoveryScript appends a marker of its own (pending, then done) and a
// clear_marker intervention for it: three records per invocation.
const recoveryScript = `local idem, state = require("apollo.idem"), require("apollo.state")
local name = "script_" .. arg[1]
idem.once(name, function() return arg[1] end)
state.clear_marker(name, "concurrency test " .. arg[1])
`

// waitForFile waits until path exists (up to a minute), or fails.
func waitForFile(t *testing.T, path string, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		select {
		case <-done:
			t.Fatalf("the runner ended before %s appeared", path)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("%s did not appear within a minute", path)
}

// TestConcurrentAppenders runs 64 parallel Lua steps writing idem markers
// (--parallel 65; -short: 16) while two loops of `apollo script` processes
// (12 invocations each; -short: 4) append markers and interventions to the
// same log. Afterwards every line decodes
// on its own (no interleaved or torn line), seq runs 1..N without a gap,
// and every record of every writer is there: each step's markers and
// files, each script's marker and intervention, and nothing else.
// APOLLO_CONC_REPS sets the number of rounds (CI: 3; -short: 1).
func TestConcurrentAppenders(t *testing.T) {
	steps, scripts := concSize()
	dir := t.TempDir()
	writePipeline(t, dir, concurrencyPipeline(steps))
	writeFileT(t, filepath.Join(dir, "recover.lua"), []byte(recoveryScript))
	reps := envInt("APOLLO_CONC_REPS", 3)
	if testing.Short() && os.Getenv("APOLLO_CONC_REPS") == "" {
		reps = 1
	}
	for rep := range reps {
		t.Run(fmt.Sprintf("round%d", rep), func(t *testing.T) {
			for _, f := range []string{"go", "release"} {
				os.Remove(filepath.Join(dir, f))
			}
			concurrentAppenders(t, dir, fmt.Sprintf("conc%d", rep), steps, scripts)
		})
	}
}

// concurrentAppenders runs one round of TestConcurrentAppenders as task,
// with steps Lua steps and loops of scripts invocations of apollo script.
func concurrentAppenders(t *testing.T, dir, task string, steps, scripts int) {

	runner := apolloCmd(t, dir, nil, "run", "pipeline.yaml", "--task-id", task, "--parallel", strconv.Itoa(steps+1), "-q")
	var rout, rerr bytes.Buffer
	runner.Stdout, runner.Stderr = &rout, &rerr
	if err := runner.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var runRes runResult
	go func() {
		runRes = waitResult(runner, runner.Wait(), &rout, &rerr)
		close(done)
	}()
	defer func() {
		writeFileT(t, filepath.Join(dir, "go"), nil)
		writeFileT(t, filepath.Join(dir, "release"), nil)
		<-done
	}()
	waitForFile(t, filepath.Join(dir, ".apollo", "logs", "task_"+task+".lock"), done)
	for taskLog(dir, task) == "" {
		time.Sleep(10 * time.Millisecond)
	}

	// The first script runs while the steps wait for "go"; the others run
	// while they write their markers.
	scriptErrs := make(chan error, concLoops*scripts)
	runScript := func(n int) {
		res := runApollo(t, dir, nil, "script", "recover.lua", "--task-id", task, "--", strconv.Itoa(n))
		if res.code != 0 || strings.Contains(res.stderr, "panic") {
			scriptErrs <- fmt.Errorf("apollo script #%d: exit %d: %s", n, res.code, res.stderr)
		}
	}
	runScript(0)
	writeFileT(t, filepath.Join(dir, "go"), nil)
	var wg sync.WaitGroup
	for loop := range concLoops {
		wg.Go(func() {
			for k := range scripts {
				runScript(1 + loop*scripts + k)
			}
		})
	}
	wg.Wait()
	writeFileT(t, filepath.Join(dir, "release"), nil)
	<-done
	close(scriptErrs)
	for err := range scriptErrs {
		t.Error(err)
	}
	noPanic(t, "apollo run", runRes)
	if runRes.code != 0 {
		t.Fatalf("apollo run: exit %d; stderr:\n%s", runRes.code, runRes.stderr)
	}

	path := taskLog(dir, task)
	raw := mustRead(t, path)
	// Each line on its own: one JSON object, its checksum right, seq next.
	lines := bytes.SplitAfter(raw, []byte("\n"))
	if last := lines[len(lines)-1]; len(last) != 0 {
		t.Fatalf("the log ends in an unfinished line: %.200s", last)
	}
	lines = lines[:len(lines)-1]
	recs := make([]*eventlog.Record, len(lines))
	for i, line := range lines {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("line %d is not one JSON object (interleaved writes?): %v: %.300s", i+1, err, line)
		}
		r, err := eventlog.Decode(bytes.TrimSuffix(line, []byte("\n")))
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if r.Seq != int64(i+1) {
			t.Fatalf("line %d has seq %d, want %d", i+1, r.Seq, i+1)
		}
		if r.TaskID != task {
			t.Fatalf("line %d has task_id %q", i+1, r.TaskID)
		}
		recs[i] = r
	}
	if _, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: task}); err != nil {
		t.Fatalf("the log does not read back: %v", err)
	}

	// Every record of every writer, and nothing else.
	count := map[string]int{}
	for _, r := range recs {
		key := r.EventType + " " + r.StepID + " " + r.Status
		switch {
		case r.Marker != nil:
			key = "MARKER " + r.Marker.Name + " " + r.Marker.State
		case r.Intervention != nil:
			key = "WARNING " + r.Intervention.Action + " " + r.Intervention.Marker
		}
		count[key]++
	}
	want := map[string]int{"TASK_START  RUNNING": 1, "TASK_SUMMARY  SUCCESS": 1}
	for i := range steps {
		id := fmt.Sprintf("s%02d", i)
		want["STEP_START "+id+" RUNNING"] = 1
		want["STEP_END "+id+" SUCCESS"] = 1
		for m := 1; m <= concMarkers; m++ {
			want[fmt.Sprintf("MARKER %s_m%d pending", id, m)] = 1
			want[fmt.Sprintf("MARKER %s_m%d done", id, m)] = 1
		}
		if got, err := os.ReadFile(filepath.Join(dir, "out", id+".txt")); err != nil || string(got) != id {
			t.Errorf("out/%s.txt = %q, %v; want %q", id, got, err, id)
		}
	}
	want["STEP_START hold RUNNING"] = 1
	want["STEP_PROCESS hold RUNNING"] = 1 // the shell step's process group
	want["STEP_END hold SUCCESS"] = 1
	for n := range 1 + concLoops*scripts {
		name := fmt.Sprintf("script_%d", n)
		want["MARKER "+name+" pending"] = 1
		want["MARKER "+name+" done"] = 1
		want["WARNING clear_marker "+name] = 1
	}
	var diffs []string
	for k, n := range want {
		if count[k] != n {
			diffs = append(diffs, fmt.Sprintf("%s: %d records, want %d", k, count[k], n))
		}
	}
	for k, n := range count {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: %d unexpected records", k, n))
		}
	}
	slices.Sort(diffs)
	for _, d := range diffs {
		t.Error(d)
	}
	// How many script records landed between the steps' first and last
	// markers: reported, not asserted, as it depends on timing.
	first, last, amid := -1, -1, 0
	for i, r := range recs {
		if r.Marker != nil && r.StepID != "" {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	for i := first + 1; i < last; i++ {
		if recs[i].StepID == "" && (recs[i].Marker != nil || recs[i].Intervention != nil) {
			amid++
		}
	}
	t.Logf("concurrent-appenders records=%d steps=%d markers=%d scripts=%d script_records_amid_step_markers=%d torn=0 gaps=0 lost=%d",
		len(recs), steps, steps*concMarkers, 1+concLoops*scripts, amid, len(diffs))
}

// TestSecondRunnerLocked starts a second `apollo run` of a task (plain,
// --fresh and --resume-from) while the first runs: each exits 3 at once
// naming the first runner's pid, and writes nothing: the log keeps its
// bytes and no other log appears.
func TestSecondRunnerLocked(t *testing.T) {
	dir := t.TempDir()
	writePipeline(t, dir, `task_name: lock
steps:
  - id: a
    command: echo a
  - id: hold
    depends_on: [a]
    timeout_seconds: 120
    command: touch held; while [ ! -e release ]; do sleep 0.01; done
`)
	const task = "lock1"
	first := apolloCmd(t, dir, nil, "run", "pipeline.yaml", "--task-id", task, "-q")
	var fout, ferr bytes.Buffer
	first.Stdout, first.Stderr = &fout, &ferr
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var firstRes runResult
	go func() {
		firstRes = waitResult(first, first.Wait(), &fout, &ferr)
		close(done)
	}()
	defer func() {
		writeFileT(t, filepath.Join(dir, "release"), nil)
		<-done
	}()
	waitForFile(t, filepath.Join(dir, "held"), done)

	logs := filepath.Join(dir, ".apollo", "logs")
	before := treeDigest(t, logs)
	path := taskLog(dir, task)
	logBefore := mustRead(t, path)
	for _, args := range [][]string{
		{"run", "pipeline.yaml", "--task-id", task},
		{"run", "pipeline.yaml", "--task-id", task, "--fresh"},
		{"run", "pipeline.yaml", "--task-id", task, "--resume-from", "a"},
	} {
		res := runApollo(t, dir, nil, args...)
		what := "apollo " + strings.Join(args, " ")
		noPanic(t, what, res)
		if res.code != exitLocked {
			t.Errorf("%s: exit %d, want %d; stderr:\n%s", what, res.code, exitLocked, res.stderr)
		}
		if want := fmt.Sprintf("apollo process %d", first.Process.Pid); !strings.Contains(res.stderr, want) {
			t.Errorf("%s: stderr does not name the holder (%q):\n%s", what, want, res.stderr)
		}
		if diffs := sameTree(before, treeDigest(t, logs)); len(diffs) > 0 {
			t.Errorf("%s changed the logs folder: %v", what, diffs)
		}
		if !bytes.Equal(mustRead(t, path), logBefore) {
			t.Errorf("%s changed the log", what)
		}
	}

	writeFileT(t, filepath.Join(dir, "release"), nil)
	<-done
	if firstRes.code != 0 {
		t.Fatalf("the first runner: exit %d; stderr:\n%s", firstRes.code, firstRes.stderr)
	}
	recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: task})
	if err != nil {
		t.Fatal(err)
	}
	var starts []int
	for _, r := range recs {
		if r.EventType == eventlog.TaskStart {
			starts = append(starts, r.Start.PID)
		}
	}
	if !slices.Equal(starts, []int{first.Process.Pid}) {
		t.Errorf("TASK_START pids = %v, want only the first runner's %d", starts, first.Process.Pid)
	}
}
