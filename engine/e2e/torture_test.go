package e2e_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"apollo/engine/nemesis"
	"apollo/engine/pipeline"
	"apollo/eventlog"
)

// This file holds the crash-torture test and the harness it shares with the
// crash-point tests: a pipeline whose every side effect leaves a countable
// file, and a checker of the invariants that must hold after any crash.

// tortureSteps is the shape of the torture pipeline: ids in file order.
const tortureTask = "torture"

// torturePipeline is a parallel DAG of 31 shell and Lua steps. Every body
// first records its execution in eff/<step>/<retry>.<kind> (one line per
// execution), every cleanup in cl/<step>/<retry>; the idempotent effects
// (idem.write, idem.replace, idem.once, idem.resource) have known final
// contents.
func torturePipeline() string { return dagPipeline(tortureShape) }

// dagShape sizes the test DAG: parts parallel steps after fetch (the first
// half shell, the rest Lua, the last of them isolated), a chain of
// alternating Lua and shell steps, and finishing steps. carriers adds a
// step of each other carrier of an attempt (engine/carrier.go): a foreach
// over an output (items, fe), a child pipeline (sub, which runs
// child.yaml: writeChild) and a cached step (cached).
type dagShape struct {
	parts, chain, finish int
	carriers             bool
}

// bodiless are the carriers' steps that run no body of their own: a
// foreach template expands, a run: step's body is its child task.
var bodiless = map[string]bool{"fe": true, "sub": true}

// childPipeline is child.yaml, the sub-pipeline of the carriers' step sub.
const childPipeline = `task_name: child
steps:
  - id: k1
    command: mkdir -p ceff && echo x >> ceff/k1
`

// writeChild writes child.yaml beside dir's pipeline.
func writeChild(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "child.yaml"), []byte(childPipeline), 0o644); err != nil {
		t.Fatal(err)
	}
}

func dagPipeline(sh dagShape) string {
	var b strings.Builder
	b.WriteString(`task_name: torture
parallelism: 4
max_dirty_restarts: 100000
retry_delay_seconds: 0
steps:
`)
	const effSh = `mkdir -p eff/$APOLLO_STEP_ID && echo x >> eff/$APOLLO_STEP_ID/$APOLLO_RETRY_COUNT.sh`
	const cleanSh = `mkdir -p cl/$APOLLO_STEP_ID && echo x >> cl/$APOLLO_STEP_ID/$APOLLO_RETRY_COUNT; rm -f "$APOLLO_ARTIFACTS_DIR/$APOLLO_STEP_ID.tmp"`
	const effLua = `local fs = require("apollo.fs"); local idem = require("apollo.idem")
      fs.append("eff/" .. ctx.step_id .. "/" .. ctx.retry_count .. ".lua", "x\n")`
	const cleanLua = `require("apollo.fs").append("cl/" .. ctx.step_id .. "/" .. ctx.retry_count, "x\n")`
	shell := func(id string, deps []string, extra string, body string) {
		fmt.Fprintf(&b, "  - id: %s\n    depends_on: [%s]\n%s    command: |\n      %s\n      %s\n", id, strings.Join(deps, ", "), extra, effSh, body)
	}
	lua := func(id string, deps []string, extra string, body string) {
		fmt.Fprintf(&b, "  - id: %s\n    depends_on: [%s]\n%s    lua: |\n      %s\n      %s\n", id, strings.Join(deps, ", "), extra, effLua, body)
	}
	published := `echo "$APOLLO_STEP_ID" > "$APOLLO_ARTIFACTS_DIR/$APOLLO_STEP_ID.tmp" && sleep 0.003 && mv "$APOLLO_ARTIFACTS_DIR/$APOLLO_STEP_ID.tmp" "$APOLLO_ARTIFACTS_DIR/$APOLLO_STEP_ID.txt"`
	withCleanSh := "    cleanup_command: '" + cleanSh + "'\n"
	withCleanLua := "    cleanup_lua: '" + cleanLua + "'\n"
	shell("fetch", nil, withCleanSh, published)
	var parts []string
	for i := 1; i <= sh.parts; i++ {
		id := fmt.Sprintf("p%d", i)
		parts = append(parts, id)
		switch {
		case i <= sh.parts/2:
			shell(id, []string{"fetch"}, withCleanSh, published)
		case i == sh.parts:
			lua(id, []string{"fetch"}, "    isolation: process\n",
				`idem.write(ctx.artifacts_dir .. "/" .. ctx.step_id .. ".txt", ctx.step_id); return {part = ctx.step_id}`)
		default:
			lua(id, []string{"fetch"}, withCleanLua,
				`idem.write(ctx.artifacts_dir .. "/" .. ctx.step_id .. ".txt", ctx.step_id); return {part = ctx.step_id}`)
		}
	}
	lua("merge", parts, "", `for i = `+strconv.Itoa(sh.parts/2+1)+`, `+strconv.Itoa(sh.parts)+` do
        local o = ctx.outputs["p" .. i]
        if not o or o.part ~= "p" .. i then error("output of p" .. i .. " is missing") end
      end
      local recs = {}
      for i = 1, `+strconv.Itoa(sh.parts)+` do recs[#recs + 1] = {part = "p" .. i} end
      idem.replace("data.jsonl", "merge", recs)
      return {rows = #recs}`)
	prev := "merge"
	for i := 1; i <= sh.chain; i++ {
		id := fmt.Sprintf("c%02d", i)
		if i%2 == 1 {
			lua(id, []string{prev}, "", `idem.write("chain/" .. ctx.step_id .. ".txt", ctx.step_id)`)
		} else {
			shell(id, []string{prev}, withCleanSh, `mkdir -p chain && printf %s "$APOLLO_STEP_ID" > chain/$APOLLO_STEP_ID.tmp && mv chain/$APOLLO_STEP_ID.tmp chain/$APOLLO_STEP_ID.txt`)
		}
		prev = id
	}
	for _, id := range []string{"b1", "b2"} {
		shell(id, []string{"merge"}, "    durability: batch\n"+withCleanSh, published)
	}
	for _, id := range []string{"flaky1", "flaky2"} {
		shell(id, []string{prev}, "    optional: true\n    retry_policy: fixed\n    max_retries: 2\n", `[ "$APOLLO_RETRY_COUNT" -ge 2 ] || exit 1`)
	}
	shell("fails", []string{prev}, "    optional: true\n", "exit 1")
	lua("notify", []string{prev, "b1", "b2"}, "", `return idem.once("notify", function()
        fs.append("external/notify", "sent\n")
        return "sent"
      end, {verify = function()
        -- A kill between the append's open and its write leaves the file
        -- empty: the effect happened only if its line is there.
        return fs.exists("external/notify") and fs.read("external/notify") ~= "", "sent"
      end})`)
	lua("provision", []string{prev}, "", `return idem.resource("db", function()
        fs.append("calls/db", "x\n")
        if not fs.exists("resources/db") then idem.write("resources/db", "db-1") end
        return fs.read("resources/db")
      end, {verify = function()
        if fs.exists("resources/db") then return true, fs.read("resources/db") end
        return false
      end})`)
	for i := 1; i <= sh.finish; i++ {
		shell(fmt.Sprintf("f%d", i), []string{"notify", "provision", "flaky1", "flaky2", "fails"}, "", "sleep 0.002")
	}
	if sh.carriers {
		lua("items", []string{"fetch"}, "", `return {"a", "b"}`)
		shell("fe", []string{"items"}, "    foreach: {output: items}\n", `echo "$APOLLO_ITEM" > "$APOLLO_ARTIFACTS_DIR/fe-$APOLLO_ITEM.txt"`)
		fmt.Fprintf(&b, "  - id: sub\n    depends_on: [fetch]\n    run: child.yaml\n")
		shell("cached", []string{"fetch"}, "    cache: true\n    outputs: [cached/out.txt]\n", `mkdir -p cached && echo v > cached/out.txt`)
	}
	return b.String()
}

var tortureShape = dagShape{parts: 8, chain: 10, finish: 4}

// tortureFinal is what the complete torture task must end as.
func tortureFinal(id string) string {
	if id == "fails" {
		return eventlog.Failed
	}
	return eventlog.Success
}

// checker accumulates invariant violations of one workspace.
type checker struct {
	dir, task  string
	shape      dagShape
	final      bool // the last check: nothing may still be running
	violations []string
	hasCleanup map[string]bool
	// refs are the output references of the pipeline's steps beyond
	// their depends_on (pipeline.Step.OutputRefs), read once.
	refs map[string][]string
}

func (c *checker) fail(format string, args ...any) {
	c.violations = append(c.violations, fmt.Sprintf(format, args...))
}

// checkLog checks what must hold after any crash or resume:
//   - the log reads back (only a torn tail may be cut; seq has no gaps);
//   - no step body ran without a durable STEP_START for that attempt;
//   - an attempt's body ran at most once, attempts of a step only grow;
//   - no step started again after it succeeded;
//   - every rerun of a dirty attempt (and of a failed one with a cleanup
//     hook) came after a CLEANUP record, and the hook's effect exists;
//   - no step started (nor took a cached result) before each of its
//     dependencies was satisfied: SUCCESS or SKIPPED, or FAILED and
//     optional, as the records before its start replay it
//     (nemesis.StartOrder, shared with the nemesis's checker).
//
// It returns the records read.
func (c *checker) checkLog() []*eventlog.Record {
	path := taskLog(c.dir, c.task)
	if path == "" {
		if n := len(c.effectFiles()); n > 0 {
			c.fail("no log, yet %d step bodies ran", n)
		}
		return nil
	}
	recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: c.task})
	if err != nil {
		c.fail("log does not read back: %v", err)
		return nil
	}
	for i, r := range recs {
		if r.Seq != int64(i+1) {
			c.fail("record %d has seq %d", i+1, r.Seq)
		}
		if r.EventType == eventlog.TaskStart && r.Start != nil && c.hasCleanup == nil {
			c.hasCleanup = map[string]bool{}
			for _, s := range r.Start.Steps {
				c.hasCleanup[s.ID] = s.HasCleanup
			}
		}
	}
	started := map[[2]string]bool{}
	type hist struct {
		lastRetry  int
		last       *eventlog.Record // last attempt record (START or END)
		succeeded  bool
		cleanSince bool // a CLEANUP after the last attempt record
	}
	steps := map[string]*hist{}
	for _, r := range recs {
		if r.StepID == "" {
			continue
		}
		h := steps[r.StepID]
		if h == nil {
			h = &hist{lastRetry: -1}
			steps[r.StepID] = h
		}
		switch r.EventType {
		case eventlog.StepStart:
			started[[2]string{r.StepID, strconv.Itoa(r.RetryCount)}] = true
			if h.succeeded {
				c.fail("step %s started again (seq %d) after it succeeded", r.StepID, r.Seq)
			}
			if r.RetryCount <= h.lastRetry {
				c.fail("step %s: attempt %d (seq %d) after attempt %d", r.StepID, r.RetryCount, r.Seq, h.lastRetry)
			}
			if h.last != nil {
				dirty := h.last.EventType == eventlog.StepStart
				failed := h.last.EventType == eventlog.StepEnd && h.last.Status != eventlog.Success && h.last.Status != eventlog.Skipped
				if (dirty || (failed && c.hasCleanup[r.StepID])) && !h.cleanSince {
					c.fail("step %s: attempt %d (seq %d) reran attempt %d (dirty=%v) without a CLEANUP first",
						r.StepID, r.RetryCount, r.Seq, h.last.RetryCount, dirty)
				}
				if dirty && c.hasCleanup[r.StepID] && countLines(filepath.Join(c.dir, "cl", r.StepID, strconv.Itoa(h.last.RetryCount))) == 0 {
					c.fail("step %s: attempt %d reran dirty attempt %d, but its cleanup hook never ran",
						r.StepID, r.RetryCount, h.last.RetryCount)
				}
			}
			h.lastRetry, h.last, h.cleanSince = r.RetryCount, r, false
		case eventlog.StepEnd:
			if r.Status == eventlog.Success {
				h.succeeded = true
			}
			if r.Status != eventlog.Skipped || h.last == nil {
				h.last = r
			}
		case eventlog.Cleanup:
			h.cleanSince = true
		}
	}
	for _, v := range nemesis.StartOrder(recs, c.outputRefs()) {
		c.fail("%s", v.Detail)
	}
	for _, f := range c.effectFiles() {
		step, retry := f[0], f[1]
		if !started[[2]string{step, retry}] {
			c.fail("step %s attempt %s ran without a durable STEP_START", step, retry)
		}
		// A file with no line is an execution ended before it wrote (its
		// runner was killed alone and the resume ended it): it counts as one.
		if n := countLines(filepath.Join(c.dir, "eff", step, retry+"."+f[2])); n > 1 {
			c.fail("step %s attempt %s ran %d times", step, retry, n)
		}
	}
	return recs
}

// outputRefs reads, once, the steps whose outputs each step of the
// workspace's pipeline names beyond its depends_on: dependencies that the
// log's TASK_START does not list.
func (c *checker) outputRefs() map[string][]string {
	if c.refs != nil {
		return c.refs
	}
	c.refs = map[string][]string{}
	p, err := pipeline.Load(filepath.Join(c.dir, "pipeline.yaml"), pipeline.LoadOptions{})
	if err != nil {
		c.fail("the pipeline does not load: %v", err)
		return c.refs
	}
	for _, s := range p.Steps {
		if len(s.OutputRefs) > 0 {
			c.refs[s.ID] = s.OutputRefs
		}
	}
	return c.refs
}

// effectFiles lists (step, retry, kind) of every recorded execution.
func (c *checker) effectFiles() [][3]string {
	var out [][3]string
	steps, _ := os.ReadDir(filepath.Join(c.dir, "eff"))
	for _, s := range steps {
		files, _ := os.ReadDir(filepath.Join(c.dir, "eff", s.Name()))
		for _, f := range files {
			retry, kind, _ := strings.Cut(f.Name(), ".")
			out = append(out, [3]string{s.Name(), retry, kind})
		}
	}
	return out
}

// checkIdempotent checks the idempotent effects, during a run (partial:
// at most what they must be) or at the end (exactly).
func (c *checker) checkIdempotent(final bool) {
	read := func(rel string) (string, bool) {
		b, err := os.ReadFile(filepath.Join(c.dir, rel))
		return string(b), err == nil
	}
	if n := countLines(filepath.Join(c.dir, "external", "notify")); n > 1 || (final && n != 1) {
		c.fail("idem.once effect happened %d times", n)
	}
	if s, ok := read("resources/db"); (ok && s != "db-1") || (final && !ok) {
		c.fail("idem.resource: resources/db = %q (exists %v)", s, ok)
	}
	if s, ok := read("data.jsonl"); ok || final {
		lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
		seen := map[string]int{}
		for _, l := range lines {
			seen[l]++
		}
		for i := 1; i <= c.shape.parts; i++ {
			l := fmt.Sprintf(`{"_key":"merge","part":"p%d"}`, i)
			if seen[l] != 1 {
				c.fail("idem.replace: data.jsonl holds %q %d times:\n%s", l, seen[l], s)
			}
		}
		if len(lines) != c.shape.parts {
			c.fail("idem.replace: data.jsonl has %d lines, want %d", len(lines), c.shape.parts)
		}
	}
	for i := 1; i <= c.shape.chain; i++ {
		id := fmt.Sprintf("c%02d", i)
		if s, ok := read("chain/" + id + ".txt"); (ok && s != id) || (final && !ok) {
			c.fail("chain/%s.txt = %q (exists %v)", id, s, ok)
		}
	}
	arts := filepath.Join(".apollo", "artifacts", c.task)
	ids := []string{"fetch", "b1", "b2"}
	for i := 1; i <= c.shape.parts; i++ {
		ids = append(ids, fmt.Sprintf("p%d", i))
	}
	for _, id := range ids {
		s, ok := read(filepath.Join(arts, id+".txt"))
		if ok && strings.TrimSpace(s) != id || (final && !ok) {
			c.fail("artifact %s.txt = %q (exists %v)", id, s, ok)
		}
	}
}

// checkFinal checks the complete task: every step in its designed state,
// the run's last record a TASK_SUMMARY SUCCESS, each succeeded step's body
// run at least once and at most once per STEP_START.
func (c *checker) checkFinal(recs []*eventlog.Record, final func(string) string) {
	if len(recs) == 0 {
		c.fail("no records at the end")
		return
	}
	st := eventlog.Replay(c.task, recs)
	for id := range c.hasCleanup {
		if got, want := st.Step(id).Status, final(id); got != want {
			c.fail("step %s ended %s, want %s", id, got, want)
		}
	}
	if last := recs[len(recs)-1]; last.EventType != eventlog.TaskSummary || last.Status != eventlog.Success {
		c.fail("last record is %s %s, want TASK_SUMMARY SUCCESS", last.EventType, last.Status)
	}
	starts := map[string]int{}
	for _, r := range recs {
		if r.EventType == eventlog.StepStart {
			starts[r.StepID]++
		}
	}
	runs := map[string]int{}
	for _, f := range c.effectFiles() {
		runs[f[0]]++
	}
	for id := range c.hasCleanup {
		if bodiless[id] {
			continue
		}
		if st.Step(id).Status == eventlog.Success && (runs[id] < 1 || runs[id] > starts[id]) {
			c.fail("step %s succeeded with %d executions for %d STEP_STARTs", id, runs[id], starts[id])
		}
	}
}

// history is the log in short, for failure messages.
func (c *checker) history() string {
	recs, _, err := eventlog.ReadAll(taskLog(c.dir, c.task), eventlog.ReadOptions{TaskID: c.task})
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "\t\t%d %s %s %s retry=%d", r.Seq, r.EventType, r.StepID, r.Status, r.RetryCount)
		if r.Marker != nil {
			fmt.Fprintf(&b, " marker=%s:%s", r.Marker.Name, r.Marker.State)
		}
		if r.ErrorMessage != "" {
			fmt.Fprintf(&b, " error=%q", r.ErrorMessage)
		}
		if r.Message != "" {
			fmt.Fprintf(&b, " message=%q", r.Message)
		}
		b.WriteString("\n")
	}
	if err != nil {
		fmt.Fprintf(&b, "\t\t%v\n", err)
	}
	return b.String()
}

// checkNoOrphans waits briefly for every process started for dir to end.
func (c *checker) checkNoOrphans() {
	tag := []byte("APOLLO_TEST_RUN=" + c.dir + "\x00")
	deadline := time.Now().Add(3 * time.Second)
	for {
		alive := liveProcsWithEnv(tag)
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			c.fail("processes of the task outlived the final run: %v", alive)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTorture kills the real binary with SIGKILL at random moments while it
// runs the 31-step DAG — mid-step, mid-cleanup, mid-recovery, mid-summary —
// resumes until the task is complete, and checks the invariants after every
// kill and at the end. APOLLO_TORTURE_KILLS sets the number of kills (CI:
// 100; -short: 4; long mode: 1,000); APOLLO_SEED replays a schedule.
func TestTorture(t *testing.T) {
	kills := envInt("APOLLO_TORTURE_KILLS", 100)
	switch {
	case os.Getenv("APOLLO_TORTURE_KILLS") != "":
	case testing.Short():
		kills = 4 // a smoke check: 15 kills took 20 s
	case longMode():
		kills = 1000
	}
	seed := uint64(envInt("APOLLO_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("APOLLO_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	yaml := torturePipeline()
	args := []string{"run", "pipeline.yaml", "--task-id", tortureTask, "--progress", "quiet"}

	// Calibrate: one clean run (of a built binary).
	binary(t)
	dir := t.TempDir()
	writePipeline(t, dir, yaml)
	began := time.Now()
	if res := runApollo(t, dir, nil, args...); res.code != 0 {
		t.Fatalf("clean run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	full := time.Since(began)
	c := &checker{dir: dir, task: tortureTask, shape: tortureShape, final: true}
	c.checkFinal(c.checkLog(), tortureFinal)
	c.checkIdempotent(true)
	if len(c.violations) > 0 {
		t.Fatalf("clean run: %s", strings.Join(c.violations, "\n"))
	}

	done, trials, resumes, maxResumes, groupKills := 0, 0, 0, 0, 0
	var violations []string
	for done < kills && len(violations) == 0 {
		trials++
		dir := t.TempDir()
		writePipeline(t, dir, yaml)
		c := &checker{dir: dir, task: tortureTask, shape: tortureShape}
		inTrial := 0
		for {
			var delay time.Duration
			switch {
			case inTrial >= 12 || done >= kills:
				delay = time.Hour // let the trial end
			case rng.IntN(10) < 3:
				delay = time.Duration(rng.Int64N(int64(20 * time.Millisecond)))
			case inTrial == 0:
				delay = time.Duration(rng.Int64N(int64(full * 11 / 10)))
			default:
				delay = time.Duration(rng.Int64N(int64(full / 2))) // a resume has less to do
			}
			group := rng.IntN(2) == 0 // apollo and its steps, or apollo alone
			res, _ := runKilledAfter(t, dir, args, delay, group)
			if res.killed && group {
				groupKills++
			}
			if res.killed {
				done++
				inTrial++
			}
			c.checkLog()
			c.checkIdempotent(false)
			if !res.killed && res.code != 0 {
				c.fail("run exited %d:\n%s%s", res.code, res.stdout, res.stderr)
			}
			if res.code == 0 {
				c.final = true
				c.checkFinal(c.checkLog(), tortureFinal)
				c.checkIdempotent(true)
				c.checkNoOrphans()
				break
			}
			if len(c.violations) > 0 {
				break
			}
		}
		resumes += inTrial
		maxResumes = max(maxResumes, inTrial)
		for _, v := range c.violations {
			violations = append(violations, fmt.Sprintf("trial %d (%s): %s", trials, dir, v))
		}
		if len(c.violations) > 0 {
			violations = append(violations, "the log:\n"+c.history())
		}
	}
	t.Logf("torture dag31 seed=%d kills=%d (group %d, runner only %d) trials=%d resumes=%d max_resumes_per_trial=%d clean_run=%s violations=%d",
		seed, done, groupKills, done-groupKills, trials, resumes, maxResumes, full.Round(time.Millisecond), len(violations))
	if len(violations) > 0 {
		t.Fatalf("APOLLO_SEED=%d: %d violation(s):\n%s", seed, len(violations), strings.Join(violations, "\n"))
	}
}
