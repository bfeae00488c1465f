package e2e_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"apollo/engine/cache"
	"apollo/eventlog"
)

// cacheTorturePipeline has cached steps (shell and Lua, with inputs and
// outputs, foreach instances, one with a condition), a plain one and a
// finally handler. Every body appends a line to eff/<step>;
// the inputs never change, so once a step's result is in the cache its
// body must never run again.
const cacheTorturePipeline = `task_name: ct
max_dirty_restarts: 100000
parallelism: 4
steps:
  - id: gen
    command: "mkdir -p eff && echo x >> eff/gen && sleep 0.005 && cp data.csv gen.out && echo rows=2 > $APOLLO_OUTPUT"
    cache: true
    inputs: [data.csv]
    outputs: [gen.out]
  - id: upper
    command: "mkdir -p eff sub && echo x >> eff/upper && tr a-z A-Z < gen.out > upper.out && cp upper.out sub/copy.out && sleep 0.005"
    depends_on: [gen]
    cache: true
    inputs: [gen.out]
    outputs: [upper.out, sub/copy.out]
  - id: count
    lua: |
      require("apollo.fs").append("eff/count", "x\n")
      return {n = ctx.outputs.gen.rows}
    depends_on: [gen]
    cache: true
  - id: conv
    foreach: [eu, us]
    command: "mkdir -p eff && echo x >> \"eff/$APOLLO_STEP_ID\" && echo {{item}} > conv_{{item}}.out"
    depends_on: [gen]
    cache: {key: "{{item}}", paths: ["conv_{{item}}.out"]}
  - id: maybe
    when: ctx.outputs.gen.rows == "2"
    command: "mkdir -p eff && echo x >> eff/maybe && sleep 0.003"
    depends_on: [gen]
    cache: true
  - id: plain
    command: "mkdir -p eff && echo x >> eff/plain"
    depends_on: [upper, count, conv, maybe]
finally:
  - id: notify
    command: "mkdir -p eff && echo x >> eff/notify"
`

// cacheTortureSteps are the cached steps.
var cacheTortureSteps = []string{"gen", "upper", "count", "conv[eu]", "conv[us]", "maybe"}

// TestCacheTorture kills the binary with SIGKILL at random moments while
// successive tasks of one pipeline run with cache: steps, some with their
// output files deleted first, some with the cache emptied, resumes each to its end, and checks after
// every invocation: the cache holds only whole entries; a step whose
// result was in the cache when its task began never runs; a step taken
// from the cache never starts in that log; and at the end of each task the
// output files hold what the steps make. APOLLO_CACHE_TORTURE_KILLS sets
// the number of kills (default 40, 2 with -short); APOLLO_SEED replays one.
func TestCacheTorture(t *testing.T) {
	kills := envInt("APOLLO_CACHE_TORTURE_KILLS", 40)
	if testing.Short() && os.Getenv("APOLLO_CACHE_TORTURE_KILLS") == "" {
		kills = 2 // a smoke check: 6 kills took 11 s
	}
	seed := uint64(envInt("APOLLO_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("APOLLO_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	binary(t)
	dir := t.TempDir()
	writePipeline(t, dir, cacheTorturePipeline)
	if err := os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	store := cache.New(filepath.Join(dir, ".apollo"), nil)
	var full time.Duration
	done := 0
	var violations []string
	fail := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }
	for task := 0; (done < kills || task < 2) && len(violations) == 0 && task < 10*kills+2; task++ {
		id := fmt.Sprintf("t%d", task)
		switch {
		case task%2 == 1:
			os.Remove(filepath.Join(dir, "gen.out"))
			os.Remove(filepath.Join(dir, "sub", "copy.out"))
			os.Remove(filepath.Join(dir, "conv_us.out"))
		case task%4 == 2:
			// The steps run again, and are killed while their results are
			// saved.
			if _, err := store.GC(cache.GCOptions{All: true, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
		entries, _ := store.List()
		cachedAtStart := map[string]bool{}
		for _, e := range entries {
			cachedAtStart[e.Step] = true
		}
		effAtStart := effects(dir)
		args := []string{"run", "pipeline.yaml", "--task-id", id, "--progress", "quiet"}
		for inTask := 0; ; inTask++ {
			delay := time.Hour
			if task > 0 && inTask < 5 && done < kills {
				delay = time.Duration(rng.Int64N(int64(full*11/10) + 1))
			}
			res, took := runKilledAfter(t, dir, args, delay, rng.IntN(2) == 0)
			if task == 0 && !res.killed {
				full = took
			}
			if res.killed {
				done++
			} else if res.code != 0 {
				fail("task %s: run exited %d:\n%s%s%s", id, res.code, res.stdout, res.stderr, failures(dir, id))
			}
			checkCacheWhole(store, fail)
			time.Sleep(20 * time.Millisecond) // a body the kill left running ends
			eff := effects(dir)
			for _, step := range cacheTortureSteps {
				if cachedAtStart[step] && eff[step] > effAtStart[step] {
					fail("task %s: step %s ran (%d times, %d before) though its result was in the cache", id, step, eff[step], effAtStart[step])
				}
			}
			checkCachedNeverStart(dir, id, fail)
			if !res.killed || len(violations) > 0 {
				break
			}
		}
		if len(violations) > 0 {
			break
		}
		for file, want := range map[string]string{"gen.out": "a,b\n", "upper.out": "A,B\n", "sub/copy.out": "A,B\n",
			"conv_eu.out": "eu\n", "conv_us.out": "us\n"} {
			if b, err := os.ReadFile(filepath.Join(dir, file)); string(b) != want {
				fail("task %s: %s = %q, %v; want %q", id, file, b, err, want)
			}
		}
	}
	t.Logf("cache torture seed=%d kills=%d clean_run=%s violations=%d", seed, done, full.Round(time.Millisecond), len(violations))
	if len(violations) > 0 {
		t.Fatalf("APOLLO_SEED=%d: %s", seed, strings.Join(violations, "\n"))
	}
}

// effects counts the executions of each step's body: eff/<step>'s lines.
func effects(dir string) map[string]int {
	out := map[string]int{}
	for _, step := range slices.Concat(cacheTortureSteps, []string{"plain", "notify"}) {
		out[step] = countLines(filepath.Join(dir, "eff", step))
	}
	return out
}

// checkCacheWhole checks every entry reads and names blobs that are there
// and hold what their digest says.
func checkCacheWhole(store *cache.Store, fail func(string, ...any)) {
	entries, bad := store.List()
	for _, err := range bad {
		fail("cache entry unreadable: %v", err)
	}
	for _, e := range entries {
		for _, f := range e.Outputs {
			d, _, err := cache.HashFile(store.Blob(f.Digest))
			if err != nil || d != f.Digest {
				fail("cache entry %s: blob of %s is %s, %v; want %s", e.File, f.Path, d, err, f.Digest)
			}
		}
	}
}

// checkCachedNeverStart checks that a step whose STEP_END came from the
// cache has no STEP_START after it in the task's log, nor does any step
// that succeeded (a handler runs once after success), and that the
// instances of conv are the same in every TASK_START.
func checkCachedNeverStart(dir, task string, fail func(string, ...any)) {
	path := taskLog(dir, task)
	if path == "" {
		return
	}
	recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: task})
	if err != nil {
		fail("task %s: read the log: %v", task, err)
		return
	}
	cached, succeeded := map[string]bool{}, map[string]bool{}
	for _, r := range recs {
		switch {
		case r.EventType == eventlog.TaskStart && r.Start != nil:
			var ids []string
			for _, si := range r.Start.Steps {
				if strings.HasPrefix(si.ID, "conv") {
					ids = append(ids, si.ID)
				}
			}
			if got := strings.Join(ids, ","); got != "conv[eu],conv[us]" {
				fail("task %s: TASK_START names the instances %s, want conv[eu],conv[us]", task, got)
			}
		case r.EventType == eventlog.StepEnd && r.CachedFrom != "":
			if r.Status != eventlog.Success {
				fail("task %s: step %s: a STEP_END with cached_from is %s", task, r.StepID, r.Status)
			}
			cached[r.StepID] = true
		case r.EventType == eventlog.StepStart && cached[r.StepID]:
			fail("task %s: step %s started after its result came from the cache", task, r.StepID)
		case r.EventType == eventlog.StepStart && succeeded[r.StepID]:
			fail("task %s: step %s started again after it succeeded", task, r.StepID)
		}
		if r.EventType == eventlog.StepEnd && r.Status == eventlog.Success {
			succeeded[r.StepID] = true
		}
	}
}

// failures lists the errors of the task's failed attempts and cleanups.
func failures(dir, task string) string {
	recs, _, err := eventlog.ReadAll(taskLog(dir, task), eventlog.ReadOptions{TaskID: task})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, r := range recs {
		if r.ErrorMessage != "" {
			fmt.Fprintf(&b, "%s %s %s attempt %d: %s\n", r.EventType, r.StepID, r.Status, r.RetryCount, r.ErrorMessage)
		}
	}
	return b.String()
}
