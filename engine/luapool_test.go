package engine

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/eventlog"
)

// TestLuaWorkers: Lua steps run in worker processes. A memory bomb fails
// its own step with the limit in the message while its neighbour finishes,
// and the runner's heap never holds the bomb's; isolation: inprocess runs
// in the runner; a worker's commands carry the attempt's tag; markers go
// through the runner into the log.
func TestLuaWorkers(t *testing.T) {
	dir := t.TempDir()
	yaml := `task_name: workers
parallelism: 3
steps:
  - id: bomb
    memory_mb: 32
    timeout_seconds: 60
    optional: true
    lua: |
      local t = {}
      for i = 1, 1e10 do t[i] = {i} end
  - id: pooled
    allow: [exec]
    lua: |
      local exec = require("apollo.exec")
      local r = exec.run({"sh", "-c", "echo $PPID $APOLLO_ATTEMPT"})
      local limit = exec.run({"sh", "-c", "ulimit -d"})
      local idem = require("apollo.idem")
      local once = idem.once("pooled-once", function() return {n = 42} end)
      return {out = r.stdout, task = ctx.task_id, once = once.n, limit = limit.stdout}
  - id: here
    isolation: inprocess
    allow: [exec]
    lua: |
      local r = require("apollo.exec").run({"sh", "-c", "echo $PPID"})
      return r.stdout
`
	runtime.GC()
	base := heapLive()
	var peak uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			peak = max(peak, heapObjects())
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	err, st, out := runPipeline(t, dir, yaml, RunOptions{}, Options{})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out)
	}
	bomb := st.Step("bomb")
	if bomb.Status != eventlog.Failed || !strings.Contains(bomb.LastError, "memory limit exceeded (memory_mb 32)") {
		t.Errorf("bomb: %s %q, want FAILED with memory limit exceeded (memory_mb 32)", bomb.Status, bomb.LastError)
	}
	if grew := int64(peak) - int64(base); grew > 24<<20 {
		t.Errorf("the runner's heap grew by %d MiB while the bomb ran, want it to hold none of the bomb's 32", grew>>20)
	}

	self := strconv.Itoa(os.Getpid())
	var pooled struct {
		Out, Task, Limit string
		Once             float64
	}
	decodeOutput(t, st, "pooled", &pooled)
	fields := strings.Fields(pooled.Out)
	if len(fields) != 2 || fields[0] == self || !strings.HasSuffix(fields[1], "#pooled#0") {
		t.Errorf("pooled step's command saw %q, want a parent other than the runner (%s) and the attempt's tag", pooled.Out, self)
	}
	if pooled.Task != "t" || pooled.Once != 42 {
		t.Errorf("pooled step returned %+v, want task t and once 42", pooled)
	}
	// memory_mb bounds the Lua state, not the commands it runs.
	if got, want := strings.TrimSpace(pooled.Limit), ownDataLimit(); got != want {
		t.Errorf("a pooled step's command has data limit %s, want the runner's %s", got, want)
	}
	var here string
	decodeOutput(t, st, "here", &here)
	if strings.TrimSpace(here) != self {
		t.Errorf("inprocess step's command had parent %q, want the runner %s", strings.TrimSpace(here), self)
	}

	// The worker's marker, recorded by the runner: pending, then done.
	logs, _ := filepath.Glob(filepath.Join(dir, ".apollo", "logs", "task_t_*.jsonl"))
	recs, _, rerr := eventlog.ReadAll(logs[0], eventlog.ReadOptions{TaskID: "t"})
	if rerr != nil {
		t.Fatal(rerr)
	}
	var states []string
	for _, r := range recs {
		if r.EventType == eventlog.Marker && r.Marker != nil && r.Marker.Name == "pooled-once" {
			states = append(states, r.StepID+":"+r.Marker.State)
		}
	}
	if got, want := strings.Join(states, ","), "pooled:pending,pooled:done"; got != want {
		t.Errorf("markers %s, want %s", got, want)
	}
}

// TestLuaWorkerStopped: a Lua step past its timeout is stopped with its
// worker, the step says so, and its output file says it once. The limit
// leaves a loaded machine time to start the worker and print first.
func TestLuaWorkerStopped(t *testing.T) {
	dir := t.TempDir()
	yaml := `task_name: stopped
steps:
  - id: spin
    timeout_seconds: 1
    lua: |
      print("spinning")
      while true do end
`
	began := time.Now()
	err, st, _ := runPipeline(t, dir, yaml, RunOptions{}, Options{})
	if err == nil {
		t.Fatal("Run succeeded, want the step to time out")
	}
	if took := time.Since(began); took > 10*time.Second {
		t.Errorf("the run took %s, want the timeout and the kill grace", took)
	}
	s := st.Step("spin")
	if !strings.Contains(s.LastError, "timed out after 1s") {
		t.Errorf("error %q, want timed out after 1s", s.LastError)
	}
	outs, _ := filepath.Glob(filepath.Join(dir, ".apollo", "*", "*", "spin.0.log"))
	var text string
	for _, o := range outs {
		b, _ := os.ReadFile(o)
		text += string(b)
	}
	if !strings.Contains(text, "spinning") || strings.Count(text, "error: ") != 1 {
		t.Errorf("output file %q, want the print and one error line", text)
	}
}

func decodeOutput(t *testing.T, st *eventlog.State, id string, v any) {
	t.Helper()
	s := st.Step(id)
	if s.Status != eventlog.Success {
		t.Fatalf("%s: %s %q", id, s.Status, s.LastError)
	}
	if err := json.Unmarshal(s.Output, v); err != nil {
		t.Fatalf("%s: output %s: %v", id, s.Output, err)
	}
}

// ownDataLimit is this process's soft RLIMIT_DATA as `ulimit -d` prints it.
func ownDataLimit() string {
	out, _ := exec.Command("sh", "-c", "ulimit -d").Output()
	return strings.TrimSpace(string(out))
}

func heapLive() uint64    { return readUint("/gc/heap/live:bytes") }
func heapObjects() uint64 { return readUint("/memory/classes/heap/objects:bytes") }

func readUint(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
