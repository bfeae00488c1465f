package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

// crashShape is the representative pipeline of the crash-point walk: every
// kind of step of the torture DAG (shell and Lua with cleanup hooks, an
// isolated Lua step, idem.write/replace/once/resource, batch durability,
// retries, an optional failure), 16 steps, and a step of each other local
// carrier of an attempt (a foreach expansion, a child pipeline, a cached
// step), so that the one attempt lifecycle is crashed through each. The
// hub's carrier is crashed by the hub's fault tests (engine/remote_test.go).
var crashShape = dagShape{parts: 4, chain: 2, finish: 1, carriers: true}

// recoveryPoints are where the resume after a crash is crashed in turn:
// while the cleanup hook runs, before its record, mid-record, while the
// markers are resolved, before and while the summary is written.
var recoveryPoints = []string{
	"cleanup:before:1", "cleanup:after:1", "write:CLEANUP:1", "fsync:CLEANUP:1",
	"marker:pending:1", "summary:before:1", "write:TASK_SUMMARY:1", "write:TASK_START:1",
	"write:STEP_START:1", "fsync:STEP_END:2",
}

// TestCrashPoints kills the runner at exact places: for each named crash
// point (engine/crash.go) and each of its occurrences in a run of the
// representative pipeline, a run is killed there, the resume is killed at a
// recovery point (cleanup, markers, summary), and a last resume must
// complete the task; the invariants of the torture test are checked after
// each. Every (point, occurrence) pair is walked (-short: every 4th point,
// at its first occurrence); the long mode (APOLLO_LONG=1) crashes each
// pair's resume at every recovery point.
func TestCrashPoints(t *testing.T) {
	yaml := dagPipeline(crashShape)
	args := []string{"run", "pipeline.yaml", "--task-id", tortureTask, "--progress", "quiet"}

	// Which points a clean run passes, and how often.
	dir := t.TempDir()
	writePipeline(t, dir, yaml)
	writeChild(t, dir)
	trace := filepath.Join(dir, "trace")
	if res := runApollo(t, dir, []string{"APOLLO_CRASH_TRACE=" + trace}, args...); res.code != 0 {
		t.Fatalf("traced run: exit %d\n%s", res.code, res.stderr)
	}
	b, err := os.ReadFile(trace)
	if err != nil {
		t.Fatal(err)
	}
	hits := map[string]int{}
	for _, p := range strings.Fields(string(b)) {
		hits[p]++
	}
	var pairs []string
	names := make([]string, 0, len(hits))
	for p := range hits {
		names = append(names, p)
	}
	sort.Strings(names)
	for i, p := range names {
		last := hits[p]
		if testing.Short() {
			// -short: every 4th point, at its first occurrence, in 5 s
			// instead of 25; the full suite walks every pair.
			if i%4 != 0 {
				continue
			}
			last = 1
		}
		for k := 1; k <= last; k++ {
			pairs = append(pairs, fmt.Sprintf("%s:%d", p, k))
		}
	}

	type outcome struct {
		pair       string
		crashed    bool
		recovery   string
		recCrashed bool
		violations []string
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))
	// Each pair's resume is crashed at one recovery point, in turn; the
	// long mode crashes it at every recovery point.
	type job struct{ pair, recovery string }
	var jobs []job
	for i, pair := range pairs {
		if longMode() {
			for _, rp := range recoveryPoints {
				jobs = append(jobs, job{pair, rp})
			}
		} else {
			jobs = append(jobs, job{pair, recoveryPoints[i%len(recoveryPoints)]})
		}
	}
	// APOLLO_CRASH_ONLY=POINT:N[,RECOVERY:N] walks one pair: to reproduce a
	// violation the walk reported.
	if only := os.Getenv("APOLLO_CRASH_ONLY"); only != "" {
		pair, rec, _ := strings.Cut(only, ",")
		if rec == "" {
			rec = recoveryPoints[0]
		}
		jobs = []job{{pair, rec}}
	}
	results := make([]outcome, len(jobs))
	for i, j := range jobs {
		pair := j.pair
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			dir := filepath.Join(t.TempDir(), "w")
			os.Mkdir(dir, 0o755)
			writePipeline(t, dir, yaml)
			writeChild(t, dir)
			c := &checker{dir: dir, task: tortureTask, shape: crashShape}
			o := outcome{pair: pair, recovery: j.recovery}
			res := runApollo(t, dir, []string{"APOLLO_CRASH_AT=" + pair}, args...)
			o.crashed = res.killed
			if !res.killed && res.code != 0 {
				c.fail("run with %s exited %d: %s", pair, res.code, res.stderr)
			}
			c.checkLog()
			c.checkIdempotent(false)
			if res.killed {
				res = runApollo(t, dir, []string{"APOLLO_CRASH_AT=" + o.recovery}, args...)
				o.recCrashed = res.killed
				if !res.killed && res.code != 0 {
					c.fail("resume with %s exited %d: %s", o.recovery, res.code, res.stderr)
				}
				c.checkLog()
				c.checkIdempotent(false)
			}
			if res.code != 0 {
				res = runApollo(t, dir, nil, args...)
				if res.code != 0 {
					c.fail("last resume exited %d: %s", res.code, res.stderr)
				}
			}
			c.final = true
			c.checkFinal(c.checkLog(), tortureFinal)
			c.checkIdempotent(true)
			c.checkNoOrphans()
			o.violations = c.violations
			if len(c.violations) > 0 {
				o.violations = append(o.violations, "the log:\n"+c.history())
			}
			results[i] = o
		}()
	}
	wg.Wait()

	crashed, recCrashed, failed := 0, 0, 0
	for _, o := range results {
		if o.crashed {
			crashed++
		}
		if o.recCrashed {
			recCrashed++
		}
		if len(o.violations) > 0 {
			failed++
			t.Errorf("crash at %s, then at %s: %s", o.pair, o.recovery, strings.Join(o.violations, "\n\t"))
		}
	}
	t.Logf("crashpoints dag16 points=%d pairs=%d runs=%d crashed=%d recovery_crashed=%d passed=%d violations=%d",
		len(names), len(pairs), len(jobs), crashed, recCrashed, len(jobs)-failed, failed)
	if len(jobs) > 1 && crashed < len(jobs)*9/10 {
		t.Errorf("only %d of %d crash points were reached", crashed, len(jobs))
	}
}
