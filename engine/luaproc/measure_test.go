package luaproc

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// legitJobs stay under the limit but come near it: they must finish. The
// code starts with `local MB = <the limit in MiB>`.
var legitJobs = []struct{ name, code string }{
	// 60% of the limit kept in strings while 6 times the limit passes
	// through as garbage.
	{"strings60%+churn", `local keep = {}
		for i = 1, math.floor(MB * 0.6) do keep[i] = string.rep("k", 1048576 - 8) .. i end
		local n = 0
		for i = 1, MB * 6 do local g = string.rep("g", 1048576 - 8) .. i n = n + #g end
		return #keep`},
	// Small tables kept (about half the limit), with garbage tables beside.
	{"tables50%+churn", `local keep = {}
		for i = 1, MB * 3500 do keep[i] = {i} local g = {i, i} end
		return #keep`},
}

// TestMeterModes measures how each way of bounding memory fares (the
// package documentation's table): time to stop each bomb and how (a clean
// stop, or the child dying), the child's peak RSS, and whether work near
// the limit finishes. Only with LUAPROC_MEASURE=1; LUAPROC_MEASURE_MB sets
// the limit (default 64), LUAPROC_MEASURE_RUNS the repeats (default 3).
func TestMeterModes(t *testing.T) {
	if os.Getenv("LUAPROC_MEASURE") == "" {
		t.Skip("set LUAPROC_MEASURE=1 to measure")
	}
	mb := 64
	if n, err := strconv.Atoi(os.Getenv("LUAPROC_MEASURE_MB")); err == nil && n > 0 {
		mb = n
	}
	runs := 3
	if n, err := strconv.Atoi(os.Getenv("LUAPROC_MEASURE_RUNS")); err == nil && n > 0 {
		runs = n
	}
	type job struct{ name, code string }
	var jobs []job
	for _, b := range memoryBombs {
		jobs = append(jobs, job{b.name, b.code})
	}
	for _, l := range legitJobs {
		jobs = append(jobs, job{l.name, fmt.Sprintf("local MB = %d\n", mb) + l.code})
	}
	for _, mode := range []string{"", "objects", "golimit", "rlimit"} {
		name := mode
		if name == "" {
			name = "default"
		}
		p := testPool(t, mode, Options{MaxIdle: 1})
		for _, j := range jobs {
			var times []string
			var outcomes []string
			var peak int64
			for range runs {
				stop := make(chan struct{})
				var wg sync.WaitGroup
				var mu sync.Mutex
				wg.Go(func() {
					for {
						for _, c := range ownChildren() {
							h := statusBytes(c, "VmHWM")
							mu.Lock()
							peak = max(peak, h)
							mu.Unlock()
						}
						select {
						case <-stop:
							return
						case <-time.After(5 * time.Millisecond):
						}
					}
				})
				began := time.Now()
				_, err := p.Run(t.Context(), jobJSON(testJob{Op: "lua", Lua: j.code, MB: mb}), Limits{MemoryMB: mb}, noRequests)
				took := time.Since(began)
				close(stop)
				wg.Wait()
				var me *MemoryError
				outcome := "ok"
				switch {
				case errors.As(err, &me) && me.Died:
					outcome = "died"
				case errors.As(err, &me):
					outcome = "stopped"
				case err != nil:
					outcome = "error: " + strings.SplitN(err.Error(), "\n", 2)[0]
				}
				times = append(times, took.Round(10*time.Millisecond).String())
				outcomes = append(outcomes, outcome)
			}
			t.Logf("%-8s %-15s %-28s %-40s child peak %d MiB", name, j.name, strings.Join(outcomes, ","), strings.Join(times, " "), peak>>20)
		}
		p.Close()
	}
}

// ownChildren lists the test process's children.
func ownChildren() []int {
	tasks, _ := filepath.Glob("/proc/self/task/*/children")
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

// statusBytes reads a "Name: N kB" field of /proc/pid/status in bytes.
func statusBytes(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}
