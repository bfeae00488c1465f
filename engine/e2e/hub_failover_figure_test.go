package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
)

// TestHubFailoverFigures measures what docs/performance.md reports of a
// coordinator's death, with whole processes: `apollo hub` (1 node, then 3),
// one `apollo worker`, and a coordinator `apollo run --hub --task-id t`
// killed with SIGKILL while the second step of a chain runs; then the same
// command on another, empty state folder, started again every 50 ms while
// it exits 3 (the lease is held), as a supervisor would. It times, from the
// kill: the new coordinator's rebuilt log (the lease's life, its start and
// the rebuild), its first DISPATCH (the cut-off step's next attempt), and
// that attempt's body running on the worker. Rounds alternate nothing (one
// kind); it prints the medians and asserts nothing of time:
//
//	APOLLO_HUB_FIGURES=1 go test ./engine/e2e -run TestHubFailoverFigures -v
//
// APOLLO_HUB_LEASE_TTL_FIGURE sets the lease's life (default 2s; 30s in
// production), APOLLO_HUB_ROUNDS the rounds (default 5).
func TestHubFailoverFigures(t *testing.T) {
	if os.Getenv("APOLLO_HUB_FIGURES") == "" {
		t.Skip("set APOLLO_HUB_FIGURES=1 to measure (minutes)")
	}
	ttl := 2 * time.Second
	if d, err := time.ParseDuration(os.Getenv("APOLLO_HUB_LEASE_TTL_FIGURE")); err == nil {
		ttl = d
	}
	rounds := envInt("APOLLO_HUB_ROUNDS", 5)
	binary(t)
	for _, nodes := range []int{1, 3} {
		dir := t.TempDir()
		ports, err := hubtest.FreePorts(2 * nodes)
		if err != nil {
			t.Fatal(err)
		}
		var urls, routes []string
		for i := range nodes {
			urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(ports[i]))
			routes = append(routes, "127.0.0.1:"+strconv.Itoa(ports[nodes+i]))
		}
		hubURLs := strings.Join(urls, ",")
		env := []string{"APOLLO_LIVENESS=3s", "APOLLO_HUB_CALL_TIMEOUT=1s", "APOLLO_HUB_GIVE_UP=60s",
			"APOLLO_HUB_LEASE_TTL=" + ttl.String()}
		var procs []*exec.Cmd
		start := func(args ...string) *exec.Cmd {
			cmd := apolloCmd(t, dir, env, args...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			procs = append(procs, cmd)
			return cmd
		}
		for i := range nodes {
			args := []string{"hub", "--store", filepath.Join(dir, fmt.Sprintf("h%d", i)), "--listen", strings.TrimPrefix(urls[i], "nats://")}
			if nodes > 1 {
				args = append(args, "--name", fmt.Sprintf("h%d", i), "--cluster", routes[i], "--routes", strings.Join(routes, ","))
			}
			start(args...)
		}
		waitStreams(t, hubURLs)
		start("worker", "--hub", hubURLs, "--slots", "2", "--state-dir", filepath.Join(dir, "ws"))
		var rebuilt, dispatched, running []float64
		for round := range rounds {
			task := fmt.Sprintf("t%d", round)
			marks := filepath.Join(dir, task+".marks")
			os.MkdirAll(marks, 0o755)
			pipeline := filepath.Join(dir, task+".yaml")
			os.WriteFile(pipeline, []byte(fmt.Sprintf("task_name: f\nsteps:\n  - id: a\n    command: 'true'\n"+
				"  - id: b\n    command: 'touch %s/b.$APOLLO_RETRY_COUNT; sleep 30'\n    depends_on: [a]\n", marks)), 0o644)
			first := start("run", pipeline, "--hub", hubURLs, "--task-id", task, "--state-dir", filepath.Join(dir, task+".dead"), "--progress", "quiet")
			waitFile(t, filepath.Join(marks, "b.0"), 60*time.Second)
			syscall.Kill(first.Process.Pid, syscall.SIGKILL)
			died := time.Now()
			first.Wait()
			os.RemoveAll(filepath.Join(dir, task+".dead"))
			// The next coordinator, on an empty state folder, again and
			// again while the dead one's lease holds the task.
			state := filepath.Join(dir, task+".other")
			var stderr bytes.Buffer
			var next *exec.Cmd
			for next == nil {
				cmd := apolloCmd(t, dir, env, "run", pipeline, "--hub", hubURLs, "--task-id", task, "--state-dir", state, "--progress", "quiet")
				stderr.Reset()
				cmd.Stderr = &stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				exited := make(chan error, 1)
				go func() { exited <- cmd.Wait() }()
				for next == nil {
					select {
					case err := <-exited:
						if cmd.ProcessState.ExitCode() != 3 {
							t.Fatalf("the next coordinator exited with %v: %s", err, stderr.String())
						}
						time.Sleep(50 * time.Millisecond)
					case <-time.After(5 * time.Millisecond):
						if dispatchedAgain(state, task) {
							next = cmd
							procs = append(procs, cmd)
						}
						continue
					}
					break
				}
			}
			dispatched = append(dispatched, time.Since(died).Seconds())
			// When it rebuilt, from its log file's modification time:
			// the rebuild writes it whole, before anything is appended.
			waitFile(t, filepath.Join(marks, "b.1"), 60*time.Second)
			running = append(running, time.Since(died).Seconds())
			if logs, _ := filepath.Glob(filepath.Join(state, "logs", "task_"+task+"_*.jsonl")); len(logs) > 0 {
				if fi, err := os.Stat(filepath.Join(state, "hub")); err == nil {
					rebuilt = append(rebuilt, fi.ModTime().Sub(died).Seconds())
				}
			}
			syscall.Kill(next.Process.Pid, syscall.SIGKILL)
			t.Logf("round %d hub=%d lease %s: coordinator killed → run key of the next made (after its rebuild) %.3f s, its first DISPATCH %.3f s, the body running again %.3f s",
				round, nodes, ttl, last(rebuilt), last(dispatched), last(running))
		}
		t.Logf("FIGURE hub=%d lease %s, medians of %d rounds: a coordinator's death to the next one's rebuilt log %.3f s, to its first DISPATCH %.3f s (%.3f s beyond the lease's life), to the step's body running again %.3f s",
			nodes, ttl, rounds, med(rebuilt), med(dispatched), med(dispatched)-ttl.Seconds(), med(running))
		for _, p := range procs {
			syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
			p.Wait()
		}
	}
}

// TestHubProcessFigures measures a hub's figures counting whole
// processes: `apollo hub` nodes (1, then 3), two `apollo worker`s of 8
// slots, and the wall time of `apollo run`, from its start to its exit,
// each round a new task. In each round, the order alternating: a chain of
// 50 `true` steps through the hub and locally (the remote step's ratio to
// the local one), and a wide DAG of 1,000 `true` steps through the hub and
// locally at parallelism 8. It prints medians and asserts nothing of time:
//
//	APOLLO_HUB_FIGURES=1 go test ./engine/e2e -run TestHubProcessFigures -v
//
// APOLLO_HUB_FIGURES=rounds measures the rounds and not the idle windows.
func TestHubProcessFigures(t *testing.T) {
	if os.Getenv("APOLLO_HUB_FIGURES") == "" {
		t.Skip("set APOLLO_HUB_FIGURES=1 to measure (minutes)")
	}
	rounds := envInt("APOLLO_HUB_ROUNDS", 5)
	binary(t)
	for _, nodes := range []int{1, 3} {
		dir := t.TempDir()
		ports, err := hubtest.FreePorts(2 * nodes)
		if err != nil {
			t.Fatal(err)
		}
		var urls, routes []string
		for i := range nodes {
			urls = append(urls, "nats://127.0.0.1:"+strconv.Itoa(ports[i]))
			routes = append(routes, "127.0.0.1:"+strconv.Itoa(ports[nodes+i]))
		}
		hubURLs := strings.Join(urls, ",")
		var procs []*exec.Cmd
		start := func(args ...string) {
			cmd := apolloCmd(t, dir, nil, args...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			procs = append(procs, cmd)
		}
		for i := range nodes {
			args := []string{"hub", "--store", filepath.Join(dir, fmt.Sprintf("h%d", i)), "--listen", strings.TrimPrefix(urls[i], "nats://")}
			if nodes > 1 {
				args = append(args, "--name", fmt.Sprintf("h%d", i), "--cluster", routes[i], "--routes", strings.Join(routes, ","))
			}
			start(args...)
		}
		waitStreams(t, hubURLs)
		for i := range 2 {
			start("worker", "--hub", hubURLs, "--slots", "8", "--state-dir", filepath.Join(dir, fmt.Sprintf("ws%d", i)))
		}
		var b strings.Builder
		b.WriteString("task_name: wide\nsteps:\n")
		for i := range 1000 {
			fmt.Fprintf(&b, "  - id: s%d\n    command: 'true'\n", i)
		}
		pipeline := filepath.Join(dir, "wide.yaml")
		os.WriteFile(pipeline, []byte(b.String()), 0o644)
		var c strings.Builder
		c.WriteString("task_name: chain\nsteps:\n")
		for i := range 50 {
			fmt.Fprintf(&c, "  - id: s%d\n    command: 'true'\n", i)
			if i > 0 {
				fmt.Fprintf(&c, "    depends_on: [s%d]\n", i-1)
			}
		}
		chain := filepath.Join(dir, "chain.yaml")
		os.WriteFile(chain, []byte(c.String()), 0o644)
		rates := map[string][]float64{}
		cpu := map[string][]float64{} // seconds of CPU per wide run through the hub, by whose
		var ratios []float64
		for round := range rounds {
			per := map[string]time.Duration{}
			for _, name := range []string{"chain-hub", "chain-local"} {
				if round%2 == 1 {
					name = map[string]string{"chain-hub": "chain-local", "chain-local": "chain-hub"}[name]
				}
				args := []string{"run", chain, "--task-id", fmt.Sprintf("c%d%s", round, name), "--state-dir", filepath.Join(dir, "st"), "--progress", "quiet"}
				if name == "chain-hub" {
					args = append(args, "--hub", hubURLs)
				}
				began := time.Now()
				if res := runApollo(t, dir, nil, args...); res.code != 0 {
					t.Fatalf("apollo %v: exit %d: %s", args, res.code, res.stderr)
				}
				per[name] = time.Since(began) / 50
			}
			ratios = append(ratios, float64(per["chain-hub"])/float64(per["chain-local"]))
			t.Logf("round %d hub=%d chain of 50 true steps: through the hub %s a step, locally %s (%.2fx)", round, nodes,
				per["chain-hub"], per["chain-local"], last(ratios))
			for i, kind := range []string{"hub", "local"} {
				if round%2 == 1 {
					kind = []string{"local", "hub"}[i]
				}
				args := []string{"run", pipeline, "--task-id", fmt.Sprintf("w%d%s", round, kind), "--state-dir", filepath.Join(dir, "st"), "--progress", "quiet"}
				if kind == "hub" {
					args = append(args, "--hub", hubURLs)
				} else {
					args = append(args, "--parallel", "8")
				}
				before := processCPU(procs)
				began := time.Now()
				res := runApollo(t, dir, nil, args...)
				if res.code != 0 {
					t.Fatalf("apollo %v: exit %d: %s", args, res.code, res.stderr)
				}
				rate := 1000 / time.Since(began).Seconds()
				if kind == "hub" && before != nil {
					after := processCPU(procs)
					var hubs, workers float64
					for i := range after {
						if i < nodes {
							hubs += after[i] - before[i]
						} else {
							workers += after[i] - before[i]
						}
					}
					cpu["hubs"] = append(cpu["hubs"], hubs)
					cpu["workers"] = append(cpu["workers"], workers)
					cpu["coordinator"] = append(cpu["coordinator"], res.cpu.Seconds())
				}
				rates[kind] = append(rates[kind], rate)
				t.Logf("round %d hub=%d wide 1000 true steps, %s: %.0f steps/s", round, nodes, kind, rate)
			}
		}
		t.Logf("FIGURE hub=%d chain of 50 true steps, whole processes, medians of %d rounds: through the hub %.2fx local", nodes, rounds, med(ratios))
		t.Logf("FIGURE hub=%d wide 1000 true steps, whole processes, 2 workers x 8 slots, medians of %d rounds: through the hub %.0f steps/s; locally at parallelism 8 %.0f steps/s",
			nodes, rounds, med(rates["hub"]), med(rates["local"]))
		if len(cpu["hubs"]) > 0 {
			t.Logf("FIGURE hub=%d wide 1000 true steps through the hub, CPU of a run, medians of %d rounds: hub nodes %.2f s, workers with their steps' processes %.2f s, coordinator %.2f s",
				nodes, rounds, med(cpu["hubs"]), med(cpu["workers"]), med(cpu["coordinator"]))
		}
		if os.Getenv("APOLLO_HUB_FIGURES") == "rounds" {
			killAll(procs) // the rounds only, not the idle windows
			continue
		}
		// What an idle pool costs its hub: the two workers wait for work
		// while nothing is dispatched.
		cpuBefore, wroteBefore := processCPU(procs[:nodes]), processWrites(procs[:nodes])
		time.Sleep(idleWindow)
		if cpuAfter, wroteAfter := processCPU(procs[:nodes]), processWrites(procs[:nodes]); cpuBefore != nil && wroteBefore != nil && cpuAfter != nil && wroteAfter != nil {
			var secs float64
			var wrote int64
			for i := range cpuAfter {
				secs += cpuAfter[i] - cpuBefore[i]
				wrote += wroteAfter[i] - wroteBefore[i]
			}
			t.Logf("FIGURE hub=%d idle, 2 workers waiting for work, %s: hub nodes %.0f ms of CPU, %d KiB written",
				nodes, idleWindow, secs*1000, wrote/1024)
		}
		// What coordinators waiting on long steps cost it: eight runs, each
		// waiting for one step that sleeps through the window.
		long := filepath.Join(dir, "long.yaml")
		os.WriteFile(long, fmt.Appendf(nil, "task_name: long\nsteps:\n  - id: s\n    command: sleep %d\n",
			int((waitSettle+idleWindow).Seconds())+3), 0o644)
		var waiting []*exec.Cmd
		for i := range 8 {
			cmd := apolloCmd(t, dir, nil, "run", long, "--hub", hubURLs, "--task-id", fmt.Sprintf("long%d", i),
				"--state-dir", filepath.Join(dir, fmt.Sprintf("st-long%d", i)), "--progress", "quiet")
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waiting = append(waiting, cmd)
		}
		time.Sleep(waitSettle)
		hubsBefore, runsBefore := processCPU(procs[:nodes]), processCPU(waiting)
		time.Sleep(idleWindow)
		if hubsAfter, runsAfter := processCPU(procs[:nodes]), processCPU(waiting); hubsBefore != nil && runsBefore != nil && hubsAfter != nil && runsAfter != nil {
			t.Logf("FIGURE hub=%d 8 coordinators each waiting on a running step, %s: hub nodes %.0f ms of CPU, the coordinators %.0f ms",
				nodes, idleWindow, 1000*(sum(hubsAfter)-sum(hubsBefore)), 1000*(sum(runsAfter)-sum(runsBefore)))
		}
		for _, cmd := range waiting {
			if err := cmd.Wait(); err != nil {
				t.Errorf("apollo run %s: %v", strings.Join(cmd.Args[1:], " "), err)
			}
		}
		killAll(procs)
	}
}

// killAll ends the process groups of procs and waits for them.
func killAll(procs []*exec.Cmd) {
	for _, p := range procs {
		syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		p.Wait()
	}
}

// idleWindow is how long TestHubProcessFigures watches an idle pool, and
// coordinators waiting on their steps once waitSettle has let those start.
const (
	idleWindow = 30 * time.Second
	waitSettle = 5 * time.Second
)

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

// dispatchedAgain reports whether the coordinator's log in state holds a
// DISPATCH of step b's attempt 1.
func dispatchedAgain(state, task string) bool {
	logs, _ := filepath.Glob(filepath.Join(state, "logs", "task_"+task+"_*.jsonl"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		if bytes.Contains(b, []byte(`"step_id":"b","event_type":"DISPATCH","status":"RUNNING","retry_count":1,`)) {
			return true
		}
	}
	return false
}

// waitStreams waits until the hub answers for its streams.
func waitStreams(t *testing.T, urls string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: urls, Name: "figures", CallTimeout: time.Second, GiveUp: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Ensure(ctx, c.ClusterSize(), false); err != nil {
		t.Fatal(err)
	}
}

func waitFile(t *testing.T, path string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s did not appear within %s", path, limit)
}

func last(xs []float64) float64 {
	if len(xs) == 0 {
		return -1
	}
	return xs[len(xs)-1]
}

func med(xs []float64) float64 {
	if len(xs) == 0 {
		return -1
	}
	s := slices.Sorted(slices.Values(xs))
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

// processCPU returns the CPU seconds each of procs has used, with the
// children it has reaped (a worker's steps), from /proc; nil where there
// is no /proc.
func processCPU(procs []*exec.Cmd) []float64 {
	return fromProc(procs, "stat", func(b []byte) (float64, bool) {
		// The fields after the command's name in parentheses, from the
		// state (field 3): utime, stime, cutime and cstime are 14 to 17.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 15 {
			return 0, false
		}
		ticks := 0
		for _, v := range f[11:15] {
			n, _ := strconv.Atoi(v)
			ticks += n
		}
		return float64(ticks) / clockTicks, true
	})
}

// processWrites returns the bytes each of procs had the kernel write to
// storage (write_bytes of /proc/PID/io); nil where that cannot be read.
func processWrites(procs []*exec.Cmd) []int64 {
	return fromProc(procs, "io", func(b []byte) (int64, bool) {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "write_bytes: "); ok {
				n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				return n, err == nil
			}
		}
		return 0, false
	})
}

// fromProc reads /proc/PID/name of each of procs through parse; nil
// where one cannot be read or parsed.
func fromProc[T any](procs []*exec.Cmd, name string, parse func([]byte) (T, bool)) []T {
	var out []T
	for _, p := range procs {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", p.Process.Pid, name))
		if err != nil {
			return nil
		}
		v, ok := parse(b)
		if !ok {
			return nil
		}
		out = append(out, v)
	}
	return out
}

// clockTicks is Linux's USER_HZ, the unit of /proc/PID/stat's times.
const clockTicks = 100
