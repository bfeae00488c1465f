package e2e_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"apollo/eventlog"
)

// The memory bound of Lua steps, measured on the real binary (issue 16,
// item 1): memory bombs of every allocation pattern, side by side at
// parallelism 1, 2, 3 and 8 with the default memory_mb (256), must each
// fail with "memory limit exceeded" within memBombDeadline (10 s; longer
// on a machine loaded past its CPUs), keep the runner's peak RSS under its
// baseline (the same run with no-op bodies) plus twice the sum of the
// running steps' memory_mb, never get the runner killed, and leave SIGTERM
// answered within the kill grace.
//
// Cost: the full matrix below (15 runs, plus a SIGTERM run and a baseline
// per parallelism) is the normal run; -short runs the pair at
// parallelism 2 and one SIGTERM run; APOLLO_LONG=1 runs the matrix 10 times
// (APOLLO_MEMBOUND_PASSES overrides the count). Every run's figures are
// logged (go test -v -run TestMemoryBound); APOLLO_MEMBOUND_ONLY=regexp
// keeps the runs whose names match ("p8/", "sigterm p2/").

// memBomb is one allocation pattern, as a Lua body that allocates without
// end.
type memBomb struct{ name, body string }

var memBombs = []memBomb{
	// String doubling by `..`: one allocation twice the last.
	{"concat", `local s = "xxxxxxxx" for i = 1, 60 do s = s .. s end`},
	// string.rep results of 1 MiB each, kept.
	{"rep", `local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1048576) .. i end`},
	// table.concat results of 1 MiB each, kept.
	{"table.concat", `local p, t = {}, {} for i = 1, 256 do p[i] = string.rep("y", 4096) end for i = 1, 1e9 do t[i] = table.concat(p) .. i end`},
	// string.format widths: 100 kB per call, kept.
	{"format", `local t = {} for i = 1, 1e9 do t[i] = string.format("%99999d", i) end`},
	// gsub expansion: 1 MiB from 64 KiB per call, kept.
	{"gsub", `local s, t = string.rep("x", 65536), {} for i = 1, 1e9 do t[i] = (s:gsub("x", "yyyyyyyyyyyyyyyy")) end`},
	// Tables of tables: millions of small objects, the GC's worst case.
	{"tables", `local t = {} for i = 1, 1e10 do t[i] = {i} end`},
	// Coroutines holding memory: each suspended with a string and its stack.
	{"coroutines", `local t = {} for i = 1, 1e9 do local co = coroutine.wrap(function(s) coroutine.yield(s) return s end) co(string.rep("z", 4096) .. i) t[i] = co end`},
}

const (
	// memBombDeadline is how long a bomb may run before it fails, on a
	// machine whose load average is at most its number of CPUs; on a busier
	// one the deadline grows with the load (loadFactor): a bomb's time is
	// CPU time (the VM, the collector, the kernel handing out pages), and
	// under a load of 20 on 2 cores a run gets a tenth of a core.
	memBombDeadline = 10 * time.Second
	// memDefaultMB is the default memory_mb.
	memDefaultMB = 256
	// memKillGrace is the kill grace of the SIGTERM runs, and memKillSlack
	// what the runner may take beyond it: a worker deep in a bomb may not
	// answer SIGTERM within the grace, and is then killed, reaped and its
	// attempt recorded before the runner exits.
	memKillGrace = time.Second
	memKillSlack = 2 * time.Second
	// memRunWall ends a run that outlives it (SIGKILL), and memSafetyCap is
	// the runner's RLIMIT_DATA soft limit: a runner that holds its steps'
	// heaps is stopped before it takes the machine down. Both count as
	// failures.
	memRunWall   = 120 * time.Second
	memSafetyCap = 8 << 30
)

// memCell is one run of the matrix: bombs side by side at a parallelism.
type memCell struct {
	par   int
	bombs []memBomb
}

func (c memCell) String() string {
	names := make([]string, len(c.bombs))
	for i, b := range c.bombs {
		names[i] = b.name
	}
	return fmt.Sprintf("p%d/%s", c.par, strings.Join(names, "+"))
}

// memMatrix is one pass: every pattern alone at parallelism 1, and at 2, 3
// and 8 the patterns in turn, so each appears at every parallelism and
// beside different neighbours.
func memMatrix() []memCell {
	var cells []memCell
	for _, par := range []int{1, 2, 3, 8} {
		n := (len(memBombs) + par - 1) / par
		for i := range n {
			c := memCell{par: par}
			for j := range par {
				c.bombs = append(c.bombs, memBombs[(i*par+j)%len(memBombs)])
			}
			cells = append(cells, c)
		}
	}
	return cells
}

func bombNamed(name string) memBomb {
	i := slices.IndexFunc(memBombs, func(b memBomb) bool { return b.name == name })
	return memBombs[i]
}

// memPipeline is cells' bombs as independent steps (body "" for a no-op).
func memPipeline(task string, par int, bodies []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task_name: %s\nparallelism: %d\nsteps:\n", task, par)
	for i, body := range bodies {
		if body == "" {
			body = "return 1"
		}
		fmt.Fprintf(&b, "  - id: b%d\n    timeout_seconds: 60\n    lua: %s\n", i, strconv.Quote(body))
	}
	return b.String()
}

// procPeak samples the peak RSS (VmHWM) of a runner and of its children.
type procPeak struct {
	mu       sync.Mutex
	runner   int64         // bytes
	children map[int]int64 // pid → bytes
	sumRSS   int64         // the largest sum of the children's VmRSS at one sample
	seen     map[int]bool  // children ever seen
	stop     chan struct{}
	done     chan struct{}
}

// statusKB reads a "Name:   123 kB" field of /proc/pid/status, in bytes.
func statusKB(pid int, field string) int64 {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// childPids lists the children of pid, from every thread's children file.
func childPids(pid int) []int {
	tasks, _ := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "children"))
	var pids []int
	for _, t := range tasks {
		b, _ := os.ReadFile(t)
		for _, f := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(f); err == nil {
				pids = append(pids, n)
			}
		}
	}
	return pids
}

func samplePeaks(pid int) *procPeak {
	p := &procPeak{children: map[int]int64{}, seen: map[int]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for {
			hwm := statusKB(pid, "VmHWM")
			var sum int64
			kids := childPids(pid)
			p.mu.Lock()
			p.runner = max(p.runner, hwm)
			for _, c := range kids {
				p.seen[c] = true
				p.children[c] = max(p.children[c], statusKB(c, "VmHWM"))
				sum += statusKB(c, "VmRSS")
			}
			p.sumRSS = max(p.sumRSS, sum)
			p.mu.Unlock()
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *procPeak) finish() {
	close(p.stop)
	<-p.done
}

// maxChild is the largest child peak.
func (p *procPeak) maxChild() int64 {
	var m int64
	for _, v := range p.children {
		m = max(m, v)
	}
	return m
}

// memRun is how one run of the binary went.
type memRun struct {
	res       runResult
	took      time.Duration
	peak      *procPeak
	ends      map[string]*eventlog.Record // STEP_END by step id
	toFail    map[string]time.Duration    // STEP_END - STEP_START by step id
	sigterm   time.Duration               // SIGTERM to exit, for SIGTERM runs
	load      float64                     // the 1-minute load average when the run began
	deadline  time.Duration               // memBombDeadline for that load
	wallHit   atomic.Bool
	lingering []string // processes of the run alive after it ended
}

func mib(n int64) string { return fmt.Sprintf("%d MiB", (n+(1<<19))>>20) }

// runMem runs pipeline in a fresh folder under root; with sigterm it sends
// SIGTERM to the runner once every step has started and had 300 ms to
// allocate.
func runMem(t *testing.T, root, task, pipeline string, steps int, sigterm bool) *memRun {
	t.Helper()
	dir := filepath.Join(root, task)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writePipeline(t, dir, pipeline)
	// The runner under a soft RLIMIT_DATA: a runner that holds the bombs'
	// heaps fails (fatal out of memory) instead of taking the machine.
	args := []string{"-c", `ulimit -S -d "$1" && shift && exec "$@"`, "sh", strconv.Itoa(memSafetyCap >> 10),
		binary(t), "run", "pipeline.yaml", "--task-id", task, "-q"}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "APOLLO_KILL_GRACE="+memKillGrace.String(), "NO_COLOR=1", "APOLLO_TEST_RUN="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	run := &memRun{peak: samplePeaks(cmd.Process.Pid), load: loadAverage()}
	run.deadline = time.Duration(float64(memBombDeadline) * max(1, run.load/float64(runtime.NumCPU())))
	exited := make(chan struct{})
	wall := time.AfterFunc(memRunWall, func() {
		run.wallHit.Store(true)
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	})
	termAt := make(chan time.Time, 1)
	if sigterm {
		go func() {
			for startedSteps(dir, task) < steps {
				select {
				case <-exited:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			time.Sleep(300 * time.Millisecond)
			termAt <- time.Now()
			cmd.Process.Signal(syscall.SIGTERM)
		}()
	}
	err := cmd.Wait()
	exitAt := time.Now()
	run.took = exitAt.Sub(began)
	close(exited)
	wall.Stop()
	run.peak.finish()
	select {
	case at := <-termAt:
		run.sigterm = exitAt.Sub(at)
	default:
	}
	run.res = waitResult(cmd, err, &stdout, &stderr)
	run.ends, run.toFail = stepEnds(t, dir, task)
	tag := []byte("APOLLO_TEST_RUN=" + dir + "\x00")
	deadline := time.Now().Add(3 * time.Second)
	for {
		run.lingering = liveProcsWithEnv(tag)
		if len(run.lingering) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, pid := range run.lingering {
		if n, err := strconv.Atoi(pid); err == nil {
			syscall.Kill(n, syscall.SIGKILL)
		}
	}
	os.RemoveAll(filepath.Join(dir, ".apollo", "outputs"))
	return run
}

// loadAverage returns the 1-minute load average, or 0.
func loadAverage() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	l, _ := strconv.ParseFloat(f[0], 64)
	return l
}

// startedSteps counts the STEP_START records of task's log so far.
func startedSteps(dir, task string) int {
	path := taskLog(dir, task)
	if path == "" {
		return 0
	}
	b, _ := os.ReadFile(path)
	return bytes.Count(b, []byte(`"event_type":"STEP_START"`))
}

// stepEnds reads the STEP_END of every step and how long after its
// STEP_START it came.
func stepEnds(t *testing.T, dir, task string) (map[string]*eventlog.Record, map[string]time.Duration) {
	t.Helper()
	ends, took := map[string]*eventlog.Record{}, map[string]time.Duration{}
	path := taskLog(dir, task)
	if path == "" {
		return ends, took
	}
	recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: task})
	if err != nil {
		t.Errorf("%s: read the log: %v", task, err)
		return ends, took
	}
	starts := map[string]time.Time{}
	for _, r := range recs {
		ts, err := time.Parse(time.RFC3339Nano, r.Timestamp)
		if err != nil {
			t.Errorf("%s: record %d: timestamp %q: %v", task, r.Seq, r.Timestamp, err)
		}
		switch r.EventType {
		case eventlog.StepStart:
			starts[r.StepID] = ts
		case eventlog.StepEnd:
			ends[r.StepID] = r
			took[r.StepID] = ts.Sub(starts[r.StepID])
		}
	}
	return ends, took
}

// memPasses is how many times the matrix runs.
func memPasses() int {
	switch {
	case testing.Short():
		return 0 // the short subset instead
	case longMode():
		return envInt("APOLLO_MEMBOUND_PASSES", 10)
	}
	return envInt("APOLLO_MEMBOUND_PASSES", 1)
}

// TestMemoryBound runs the matrix (see the top of this file).
func TestMemoryBound(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("needs /proc to measure RSS")
	}
	cells := []memCell{{par: 2, bombs: []memBomb{bombNamed("concat"), bombNamed("tables")}}}
	sigterms := []memCell{cells[0]}
	if passes := memPasses(); passes > 0 {
		cells = nil
		for range passes {
			cells = append(cells, memMatrix()...)
		}
		sigterms = nil
		for _, par := range []int{1, 2, 3, 8} {
			c := memCell{par: par}
			for j := range par {
				c.bombs = append(c.bombs, memBombs[(j+5)%len(memBombs)]) // tables first: the slowest to stop
			}
			sigterms = append(sigterms, c)
		}
	}
	if only := os.Getenv("APOLLO_MEMBOUND_ONLY"); only != "" {
		re := regexp.MustCompile(only)
		keep := func(cs []memCell, prefix string) []memCell {
			return slices.DeleteFunc(cs, func(c memCell) bool { return !re.MatchString(prefix + c.String()) })
		}
		cells, sigterms = keep(cells, ""), keep(sigterms, "sigterm ")
	}
	binary(t)
	root := t.TempDir()

	// The runner's baseline at each parallelism: the same shape, no-op bodies.
	baseline := map[int]int64{}
	for _, c := range slices.Concat(cells, sigterms) {
		if _, ok := baseline[c.par]; ok {
			continue
		}
		task := fmt.Sprintf("base%d", c.par)
		r := runMem(t, root, task, memPipeline(task, c.par, make([]string, c.par)), c.par, false)
		if r.res.code != 0 {
			t.Fatalf("baseline p%d: exit %d: %s", c.par, r.res.code, r.res.stderr)
		}
		baseline[c.par] = r.peak.runner
		t.Logf("baseline p%d: runner peak %s, largest child %s, took %s", c.par, mib(r.peak.runner), mib(r.peak.maxChild()), r.took.Round(time.Millisecond))
	}

	var worst struct {
		toFail  time.Duration
		over    int64 // runner peak - baseline, the most
		child   int64
		sigterm time.Duration
	}
	check := func(name string, c memCell, r *memRun, sigterm bool) {
		t.Helper()
		bound := baseline[c.par] + 2*int64(c.par)*memDefaultMB<<20
		var lines []string
		for i, b := range c.bombs {
			id := "b" + strconv.Itoa(i)
			end := r.ends[id]
			switch {
			case end == nil:
				t.Errorf("%s: %s (%s): no STEP_END", name, id, b.name)
				continue
			case sigterm:
				// Each bomb is interrupted, or stopped by its limit: a limit
				// its meter found is the attempt's error even when the
				// signal came first (executor/lua.go), and its STEP_END is
				// written after the worker answers, so its time says
				// nothing of which came first.
				stopped := end.Status == eventlog.Failed && strings.Contains(end.ErrorMessage, "memory limit exceeded")
				if !end.Interrupted && !stopped {
					t.Errorf("%s: %s (%s): %s %q, want interrupted or stopped by its limit", name, id, b.name, end.Status, end.ErrorMessage)
				}
			case end.Status != eventlog.Failed || !strings.Contains(end.ErrorMessage, "memory limit exceeded"):
				t.Errorf("%s: %s (%s): %s %q, want FAILED with memory limit exceeded", name, id, b.name, end.Status, abbrev(end.ErrorMessage))
			case r.toFail[id] > r.deadline:
				t.Errorf("%s: %s (%s) failed after %s, want within %s (%s at load %.1f on %d CPUs)", name, id, b.name,
					r.toFail[id].Round(time.Millisecond), r.deadline.Round(time.Millisecond), memBombDeadline, r.load, runtime.NumCPU())
			}
			if !sigterm {
				worst.toFail = max(worst.toFail, r.toFail[id])
			}
			lines = append(lines, fmt.Sprintf("%s %s", b.name, r.toFail[id].Round(time.Millisecond)))
		}
		if r.wallHit.Load() {
			t.Errorf("%s: still running after %s; killed", name, memRunWall)
		}
		if r.res.killed || strings.Contains(r.res.stderr, "fatal error") || strings.Contains(r.res.stderr, "panic:") {
			t.Errorf("%s: the runner died (exit %d, killed %v): %s", name, r.res.code, r.res.killed, abbrev(r.res.stderr))
		}
		want := exitFailed
		if sigterm {
			want = exitInterrupted
		}
		if r.res.code != want && !r.res.killed {
			t.Errorf("%s: exit %d, want %d; stderr: %s", name, r.res.code, want, abbrev(r.res.stderr))
		}
		if r.peak.runner > bound {
			t.Errorf("%s: runner peak RSS %s, over its bound %s (baseline %s + 2 × %d × %d MiB)", name, mib(r.peak.runner), mib(bound), mib(baseline[c.par]), c.par, memDefaultMB)
		}
		if sigterm && r.sigterm > memKillGrace+memKillSlack {
			t.Errorf("%s: the runner exited %s after SIGTERM, want within the kill grace (%s) and %s to kill and record", name, r.sigterm.Round(time.Millisecond), memKillGrace, memKillSlack)
		}
		if len(r.lingering) > 0 {
			t.Errorf("%s: processes outlived the runner: %v", name, r.lingering)
		}
		worst.over = max(worst.over, r.peak.runner-baseline[c.par])
		worst.child = max(worst.child, r.peak.maxChild())
		worst.sigterm = max(worst.sigterm, r.sigterm)
		extra := ""
		if sigterm {
			extra = fmt.Sprintf(", SIGTERM→exit %s", r.sigterm.Round(time.Millisecond))
		}
		t.Logf("%s: load %.1f; exit %d in %s; runner peak %s (baseline %s, bound %s); children %d, largest %s, most at once %s%s; to failure: %s",
			name, r.load, r.res.code, r.took.Round(time.Millisecond), mib(r.peak.runner), mib(baseline[c.par]), mib(bound),
			len(r.peak.seen), mib(r.peak.maxChild()), mib(r.peak.sumRSS), extra, strings.Join(lines, ", "))
	}

	for i, c := range cells {
		task := fmt.Sprintf("m%d", i)
		bodies := make([]string, len(c.bombs))
		for j, b := range c.bombs {
			bodies[j] = b.body
		}
		r := runMem(t, root, task, memPipeline(task, c.par, bodies), len(bodies), false)
		check(c.String(), c, r, false)
	}
	for i, c := range sigterms {
		task := fmt.Sprintf("t%d", i)
		bodies := make([]string, len(c.bombs))
		for j, b := range c.bombs {
			bodies[j] = b.body
		}
		r := runMem(t, root, task, memPipeline(task, c.par, bodies), len(bodies), true)
		check("sigterm "+c.String(), c, r, true)
	}
	t.Logf("membound runs=%d sigterm-runs=%d worst: to-failure %s, runner over baseline %s, largest child %s, SIGTERM→exit %s",
		len(cells), len(sigterms), worst.toFail.Round(time.Millisecond), mib(worst.over), mib(worst.child), worst.sigterm.Round(time.Millisecond))
}
