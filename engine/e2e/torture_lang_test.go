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

	"apollo/eventlog"
)

// langPipeline uses the flow of the pipeline language in one DAG: a step
// when: skips and one it runs, foreach over a var, foreach over an upstream
// output (instances made when the run gets there), a matrix with an
// exclusion, a step whose result the cache holds (from the task "warm"
// run first in each folder), an on_failure handler (the task never fails,
// so it must never start) and a finally handler. Every body first counts
// its execution in eff/.
const langPipeline = `task_name: lang
parallelism: 4
max_dirty_restarts: 100000
vars: {regions: "eu us asia"}
steps:
  - id: list
    lua: |
      require("apollo.fs").append("eff/list", "x\n")
      return {"u", "v", "w", "x", "y"}
  - id: each
    foreach: {output: list}
    command: mkdir -p eff out && echo x >> eff/each_{{item}} && sleep 0.01 && echo {{item}} > out/each_{{item}}.tmp && mv out/each_{{item}}.tmp out/each_{{item}}.txt
    depends_on: [list]
  - id: region
    foreach: {var: regions}
    command: mkdir -p eff out && echo x >> eff/region_{{item}} && sleep 0.01 && echo {{item}} > out/region_{{item}}.txt
  - id: grid
    matrix: {size: [s, m], tier: [a, b]}
    exclude: [{size: m, tier: b}]
    lua: |
      local fs = require("apollo.fs")
      fs.append("eff/grid_" .. ctx.item.size .. ctx.item.tier, "x\n")
      require("apollo.idem").write("out/grid_" .. ctx.item.size .. ctx.item.tier .. ".txt", "ok")
  - id: never
    when: ctx.vars.regions == "none"
    command: echo x >> eff/never
    depends_on: [list]
  - id: gated
    when: ctx.status.list == "SUCCESS"
    command: mkdir -p eff && echo x >> eff/gated
    depends_on: [list]
  - id: cached
    command: mkdir -p eff cout && echo x >> eff/cached && echo {{regions}} > cout/cached.txt
    cache: true
    outputs: [cout/cached.txt]
  - id: join
    command: mkdir -p eff && echo x >> eff/join && test -s cout/cached.txt && ls out > out.list.tmp && mv out.list.tmp out.list
    depends_on: [each, region, grid, gated, never, cached]
on_failure:
  - id: alert
    command: echo x >> eff/alert
finally:
  - id: report
    command: mkdir -p eff && echo "$APOLLO_TASK_STATUS" >> eff/report
`

// langInstances are the instances the pipeline must expand into, and the
// other steps that must end SUCCESS (a foreach over a var and a matrix
// expand when the run is planned: only their instances end).
var (
	langInstances = []string{"each[u]", "each[v]", "each[w]", "each[x]", "each[y]",
		"region[eu]", "region[us]", "region[asia]", "grid[s,a]", "grid[s,b]", "grid[m,a]"}
	langSucceeded = []string{"list", "each", "gated", "cached", "join", "report"}
)

// langCheck checks the language invariants on the log as it stands.
func langCheck(t *testing.T, dir string, final bool) []string {
	t.Helper()
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	path := taskLog(dir, "lang")
	if path == "" {
		return nil // killed before its log existed
	}
	recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: "lang"})
	if err != nil {
		return []string{fmt.Sprintf("the log does not read back: %v", err)}
	}
	ended := map[string]int{} // STEP_END SUCCESS per step
	expanded := map[string]bool{}
	for _, r := range recs {
		if r.EventType == eventlog.StepStart && r.StepID == "alert" {
			fail("the on_failure handler started, though the task never failed")
		}
		if r.EventType == eventlog.StepStart && r.StepID == "never" {
			fail("the step whose when: is false started")
		}
		if r.EventType == eventlog.StepStart && r.StepID == "cached" {
			fail("the step the cache holds started")
		}
		if r.EventType == eventlog.StepEnd && r.StepID == "cached" && r.Status == eventlog.Success && r.CachedFrom != "warm" {
			fail("the cached step ended SUCCESS with cached_from %q, want warm", r.CachedFrom)
		}
		if id := r.StepID; strings.Contains(id, "[") && !slices.Contains(langInstances, id) {
			fail("record of an instance the pipeline does not expand into: %s", id)
		}
		if r.EventType != eventlog.StepEnd {
			continue
		}
		if r.Status == eventlog.Success {
			ended[r.StepID]++
			if strings.HasPrefix(r.Message, "expanded into") {
				expanded[r.Message] = true
			}
		}
		if r.StepID == "report" && r.Status == eventlog.Success {
			for _, id := range append(slices.Clone(langInstances), "join") {
				if ended[id] == 0 {
					fail("the finally handler succeeded before %s did", id)
				}
			}
		}
	}
	for id, n := range ended {
		if n > 1 {
			fail("%s ended SUCCESS %d times", id, n)
		}
	}
	if len(expanded) > 2 { // each (from the output) and, for the static ones, none
		fail("the templates expanded differently across runs: %v", expanded)
	}
	if _, err := os.Stat(filepath.Join(dir, "eff", "never")); err == nil {
		fail("the body of the step whose when: is false ran")
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "eff", "cached")); len(b) != len("x\n") {
		fail("the body of the cached step ran %d times, want once (the warm task's)", len(b)/2)
	}
	if !final {
		return bad
	}
	for _, id := range append(slices.Clone(langInstances), langSucceeded...) {
		if ended[id] != 1 {
			fail("%s ended SUCCESS %d times, want once", id, ended[id])
		}
	}
	if ended["never"] != 0 {
		fail("never ended SUCCESS")
	}
	if b, err := os.ReadFile(filepath.Join(dir, "cout", "cached.txt")); err != nil || string(b) != "eu us asia\n" {
		fail("the cached step's output file was not restored: %q, %v", b, err)
	}
	list, err := os.ReadFile(filepath.Join(dir, "out.list"))
	if err != nil {
		fail("join's listing is missing: %v", err)
	}
	if n := len(strings.Fields(string(list))); n != len(langInstances) {
		fail("out/ holds %d files, want one per instance (%d):\n%s", n, len(langInstances), list)
	}
	return bad
}

// TestTortureLanguage kills the real binary with SIGKILL at random moments
// while it runs a DAG of conditions, foreach and matrix instances, a
// cached step and handlers, resumes until the task is complete, and checks
// after every kill: instances expand the same, a when: that is false never
// runs its body, the cached step never runs (its result and its output
// file come from the cache), the on_failure handler never starts (the task
// never fails), no step succeeds twice, and the finally handler succeeds
// once, after every other step. APOLLO_LANG_KILLS sets the number of kills (default 30, -short
// 3, long mode 300).
func TestTortureLanguage(t *testing.T) {
	kills := envInt("APOLLO_LANG_KILLS", 30)
	switch {
	case testing.Short():
		kills = 3 // a smoke check: 6 kills took 5 s
	case longMode() && os.Getenv("APOLLO_LANG_KILLS") == "":
		kills = 300
	}
	seed := uint64(envInt("APOLLO_SEED", int(time.Now().UnixNano()%1e9)))
	t.Logf("APOLLO_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 2))
	args := []string{"run", "pipeline.yaml", "--task-id", "lang", "--progress", "quiet"}
	binary(t)

	dir := t.TempDir()
	writePipeline(t, dir, langPipeline)
	warmCache(t, dir)
	began := time.Now()
	if res := runApollo(t, dir, nil, args...); res.code != 0 {
		t.Fatalf("clean run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	full := time.Since(began)
	if bad := langCheck(t, dir, true); len(bad) > 0 {
		t.Fatalf("clean run: %s", strings.Join(bad, "\n"))
	}

	done, trials := 0, 0
	for done < kills {
		trials++
		dir := t.TempDir()
		writePipeline(t, dir, langPipeline)
		warmCache(t, dir)
		for inTrial := 0; ; inTrial++ {
			delay := time.Hour // let the trial end
			if inTrial < 4 && done < kills {
				delay = time.Duration(rng.Int64N(int64(full)))
			}
			res, _ := runKilledAfter(t, dir, args, delay, true)
			noPanic(t, "lang", res)
			if res.killed {
				done++
			}
			if !res.killed && res.code != 0 {
				t.Fatalf("trial %d: exit %d\n%s%s", trials, res.code, res.stdout, res.stderr)
			}
			if bad := langCheck(t, dir, !res.killed); len(bad) > 0 {
				t.Fatalf("APOLLO_SEED=%d trial %d (%s), invocation %d (killed %v):\n%s", seed, trials, dir, inTrial+1, res.killed, strings.Join(bad, "\n"))
			}
			if !res.killed {
				break
			}
		}
	}
	t.Logf("torture language seed=%d kills=%d trials=%d clean_run=%s", seed, done, trials, full.Round(time.Millisecond))
}

// warmCache runs the task "warm" of the language pipeline in dir to the
// end, so that the cached step's result is in the cache, then removes the
// effects of every step but the cached one's count, and its output file,
// which the next task must restore.
func warmCache(t *testing.T, dir string) {
	t.Helper()
	if res := runApollo(t, dir, nil, "run", "pipeline.yaml", "--task-id", "warm", "--progress", "quiet"); res.code != 0 {
		t.Fatalf("warm run: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	for _, p := range []string{"out", "out.list", "cout"} {
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	effs, _ := filepath.Glob(filepath.Join(dir, "eff", "*"))
	for _, f := range effs {
		if filepath.Base(f) != "cached" {
			os.Remove(f)
		}
	}
}
