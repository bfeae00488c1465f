package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"apollo/engine/hubtest"
	"apollo/engine/worker"
)

// TestHubFigures measures what docs/performance.md reports of scale-out:
// the overhead of a remote `true` step against the same step run locally
// in the same test; a wide 1,000-step DAG on 1, 2 and 4 workers with the
// hub on 1 and 3 nodes; and the time from a worker's death to its attempt
// running elsewhere, against the liveness deadline. It asserts nothing of
// time: APOLLO_HUB_FIGURES=1 go test ./engine -run TestHubFigures -v.
func TestHubFigures(t *testing.T) {
	if os.Getenv("APOLLO_HUB_FIGURES") == "" {
		t.Skip("set APOLLO_HUB_FIGURES=1 to measure (minutes)")
	}
	chain := func(e *hubEnv, name string, n int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "task_name: %s\nsteps:\n", name)
		for i := range n {
			fmt.Fprintf(&b, "  - id: s%d\n    command: \"true\"\n", i)
			if i > 0 {
				fmt.Fprintf(&b, "    depends_on: [s%d]\n", i-1)
			}
		}
		path := filepath.Join(e.dir, name+".yaml")
		os.WriteFile(path, []byte(b.String()), 0o644)
		return path
	}
	wide := func(e *hubEnv, name string, n int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "task_name: %s\nsteps:\n", name)
		for i := range n {
			fmt.Fprintf(&b, "  - id: s%d\n    command: \"true\"\n", i)
		}
		path := filepath.Join(e.dir, name+".yaml")
		os.WriteFile(path, []byte(b.String()), 0o644)
		return path
	}
	for _, nodes := range []int{1, 3} {
		var cl *hubtest.Cluster
		if nodes == 3 {
			cl = hubtest.Start(t, 3)
		} else {
			cl = hubtest.Start(t, 1)
		}
		// Per-step overhead: a chain of 50 `true` steps, local then remote.
		{
			e := &hubEnv{t: t, cl: cl, dir: t.TempDir(), task: fmt.Sprintf("chain%d", nodes)}
			path := chain(e, "chain", 50)
			began := time.Now()
			if err := New(Options{StateDir: filepath.Join(e.dir, ".local"), Workdir: e.dir, Progress: ProgressQuiet}).Run(t.Context(), path, RunOptions{TaskID: "local"}); err != nil {
				t.Fatal(err)
			}
			local := time.Since(began) / 50
			e.startWorker("c1", cl.URLs(), nil)
			began = time.Now()
			if err := e.run(t.Context(), path, cl.URLs(), nil); err != nil {
				t.Fatal(err)
			}
			rem := time.Since(began) / 50
			t.Logf("FIGURE hub=%d chain of 50 true steps: local %s/step, remote %s/step (%.1fx)", nodes, local, rem, float64(rem)/float64(local))
		}
		if os.Getenv("APOLLO_HUB_FIGURES") == "chain" {
			continue
		}
		for _, workers := range []int{1, 2, 4} {
			e := &hubEnv{t: t, cl: cl, dir: t.TempDir(), task: fmt.Sprintf("wide%d_%d", nodes, workers)}
			path := wide(e, "wide", 1000)
			for i := range workers {
				e.startWorker(fmt.Sprintf("x%d", i), cl.URLs(), func(o *worker.Options) { o.Slots = 8 })
			}
			began := time.Now()
			if err := e.run(t.Context(), path, cl.URLs(), nil); err != nil {
				t.Fatal(err)
			}
			took := time.Since(began)
			t.Logf("FIGURE hub=%d workers=%d slots=8 wide 1000 true steps: %s, %.0f steps/s", nodes, workers, took.Round(time.Millisecond), 1000/took.Seconds())
		}
	}
	if os.Getenv("APOLLO_HUB_FIGURES") == "chain" {
		return
	}
	// Failover: a worker dies mid-step; its attempt runs elsewhere after.
	cl := hubtest.Start(t, 3)
	e := &hubEnv{t: t, cl: cl, dir: t.TempDir(), task: "failover"}
	victim := e.startWorker("victim", cl.URLs(), func(o *worker.Options) { o.Slots = 1 })
	path := filepath.Join(e.dir, "f.yaml")
	os.WriteFile(path, []byte("task_name: f\nsteps:\n  - id: a\n    command: 'sleep 2'\n"), 0o644)
	done := make(chan error, 1)
	go func() { done <- e.run(t.Context(), path, cl.URLs(), nil) }()
	s := <-victim.starts
	other := e.startWorker("other", cl.URLs(), nil)
	died := time.Now()
	victim.die(s.pgid)
	<-other.starts
	t.Logf("FIGURE worker death to its attempt running elsewhere: %s (liveness %s)", time.Since(died).Round(time.Millisecond), testLiveness)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
