package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
	"apollo/engine/worker"
	"apollo/eventlog"
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
			// The same chain with the task's log kept out of the hub, as
			// before it was: what appending each record there first costs.
			// Three rounds, in turn, on a noisy machine.
			base := e.task
			for round := range 3 {
				var with, without time.Duration
				for _, noLog := range []bool{round%2 == 0, round%2 != 0} {
					e.task = fmt.Sprintf("%s_%d_%v", base, round, noLog)
					began = time.Now()
					if err := e.run(t.Context(), path, cl.URLs(), func(ro *RunOptions) { ro.Hub.noLog = noLog }); err != nil {
						t.Fatal(err)
					}
					if noLog {
						without = time.Since(began) / 50
					} else {
						with = time.Since(began) / 50
					}
				}
				t.Logf("FIGURE hub=%d chain of 50 true steps, round %d: log in the hub %s/step, without %s/step", nodes, round, with, without)
			}
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

// TestHubRebuildFigures measures what a coordinator that carries a task on
// from an empty state folder pays to rebuild its log from the hub: 100,000
// records read, checked (crc, seq) and written, and the file's size. It
// asserts nothing of time: APOLLO_HUB_FIGURES=rebuild go test ./engine -run
// TestHubRebuildFigures -v.
func TestHubRebuildFigures(t *testing.T) {
	if os.Getenv("APOLLO_HUB_FIGURES") == "" {
		t.Skip("set APOLLO_HUB_FIGURES=1 to measure (minutes)")
	}
	const n = 100000
	for _, nodes := range []int{1, 3} {
		cl := hubtest.Start(t, nodes)
		e := &hubEnv{t: t, cl: cl, dir: t.TempDir(), task: fmt.Sprintf("rebuild%d", nodes)}
		c := e.client(cl.URLs())
		// Load: realistic records (a remote step's three), published
		// without waiting for each acknowledgement.
		for seq := int64(1); seq <= n; seq++ {
			kind := []string{eventlog.Dispatch, eventlog.StepStart, eventlog.StepEnd}[seq%3]
			line, err := eventlog.Encode(&eventlog.Record{Seq: seq, TaskID: e.task, EventType: kind, StepID: fmt.Sprintf("s%d", seq/3),
				Status: eventlog.Running, Worker: "vm:12345", InputDigest: strings.Repeat("ab", 32), SrcSeq: seq,
				Timestamp: eventlog.FormatTime(time.Now())})
			if err != nil {
				t.Fatal(err)
			}
			m := nats.NewMsg(remote.LogSubject(e.task))
			m.Data = line
			m.Header.Set(remote.HeaderSeq, strconv.FormatInt(seq, 10))
			if _, err := c.JS.PublishMsgAsync(m); err != nil {
				t.Fatal(err)
			}
			if seq%2000 == 0 {
				<-c.JS.PublishAsyncComplete()
			}
		}
		<-c.JS.PublishAsyncComplete()
		began := time.Now()
		l, err := c.OpenLog(t.Context(), e.task)
		if err != nil {
			t.Fatal(err)
		}
		r := &taskRun{e: New(Options{StateDir: filepath.Join(e.dir, ".apollo")}), t: &task{id: e.task}}
		h := &hubRun{r: r, c: c, log: l}
		lines, _, err := h.readHubLog(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(e.dir, "rebuilt.jsonl")
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			f.Write(l.line)
		}
		f.Sync()
		f.Close()
		took := time.Since(began)
		fi, _ := os.Stat(path)
		t.Logf("FIGURE hub=%d rebuild %d records: %s (%.0f records/s), %.1f MB, %d bytes a record", nodes, len(lines),
			took.Round(time.Millisecond), float64(len(lines))/took.Seconds(), float64(fi.Size())/1e6, fi.Size()/int64(len(lines)))
	}
}
