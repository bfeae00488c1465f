package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"apollo/engine/remote"
	"apollo/eventlog"
)

// The task's log in the hub (docs/spec.md §8.8), on one node and on three:
// a lost race on the log's subject is 10071 on one node and mostly 10164
// on three, and both must read as "another writer", never as a transient
// error.

// hubNodes runs test on a one-node hub and, unless -short, a three-node
// one.
func hubNodes(t *testing.T, test func(t *testing.T, nodes int)) {
	t.Run("R1", func(t *testing.T) { test(t, 1) })
	t.Run("R3", func(t *testing.T) {
		needCluster(t)
		test(t, 3)
	})
}

// hubLog reads the task's log from the hub, line by line.
func (e *hubEnv) hubLog(task string) [][]byte {
	e.t.Helper()
	c := e.client(e.cl.URLs())
	l, err := c.OpenLog(e.t.Context(), task)
	if err != nil {
		e.t.Fatal(err)
	}
	var lines [][]byte
	if err := l.Read(e.t.Context(), func(seq int64, line []byte, _ string) error {
		lines = append(lines, bytes.Clone(line))
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return lines
}

// localLog reads the task's newest log in the workspace's state folder,
// line by line.
func (e *hubEnv) localLog(task string) [][]byte {
	e.t.Helper()
	logs, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "logs", "task_"+task+"_*.jsonl"))
	if len(logs) == 0 {
		e.t.Fatalf("no log of task %s", task)
	}
	b, err := os.ReadFile(logs[len(logs)-1])
	if err != nil {
		e.t.Fatal(err)
	}
	var lines [][]byte
	for l := range bytes.Lines(b) {
		lines = append(lines, l)
	}
	return lines
}

// TestHubLogMirrorsLocal: a run with --hub has every record of its log in
// the hub, byte for byte the local file's, seq and crc included.
func TestHubLogMirrorsLocal(t *testing.T) {
	hubNodes(t, func(t *testing.T, nodes int) {
		e := newHubEnv(t, nodes)
		e.startWorker("w1", e.cl.URLs(), nil)
		path := e.dag("mirror", 2, 2, "true")
		if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
			t.Fatal(err)
		}
		local, hub := e.localLog(e.task), e.hubLog(e.task)
		if len(local) < 10 || !slicesEqual(local, hub) {
			t.Fatalf("the hub holds %d records, the local log %d; they differ:\nhub:\n%s\nlocal:\n%s",
				len(hub), len(local), bytes.Join(hub, nil), bytes.Join(local, nil))
		}
		entry, err := e.client(e.cl.URLs()).TaskIndexed(t.Context(), e.task)
		if err != nil || entry == nil || entry.Status != eventlog.Success || entry.Pipeline != path || entry.Coordinator.PID != os.Getpid() {
			t.Errorf("the hub's task index holds %+v (%v), want the task SUCCESS, its pipeline and its coordinator", entry, err)
		}
	})
}

// TestHubLogNoLocalFsyncPerStep: with the log in the hub, a record is
// durable once the hub acknowledged it, so a remote step's records wait
// for no fsync of the local file (docs/performance.md counts a remote
// step's writes): the run fsyncs its file when it closes it, not per step.
func TestHubLogNoLocalFsyncPerStep(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	e.startWorker("w1", e.cl.URLs(), nil)
	path := filepath.Join(e.dir, "chain.yaml")
	os.WriteFile(path, []byte("task_name: chain\nsteps:\n  - id: a\n    command: 'true'\n  - id: b\n    command: 'true'\n    depends_on: [a]\n"+
		"  - id: c\n    command: 'true'\n    depends_on: [b]\n  - id: d\n    command: 'true'\n    depends_on: [c]\n"), 0o644)
	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatal(err)
	}
	var fsync *eventlog.FsyncInfo
	for _, r := range e.logOf(e.task) {
		if r.Summary != nil {
			fsync = r.Summary.Fsync
		}
	}
	if fsync == nil || fsync.Count > 2 {
		t.Fatalf("the run of 4 remote steps fsynced its local log %+v times; want at most 2 (the hub's log holds each record durably)", fsync)
	}
	if local, hub := e.localLog(e.task), e.hubLog(e.task); !slicesEqual(local, hub) {
		t.Fatalf("the local log differs from the hub's")
	}
}

// TestHubReplicatedStartRidesWithEnd: through a hub of three nodes, where
// the records of one publication are one atomic batch and so one
// replicated write, a remote step's STEP_START is not published alone
// while its body runs: it waits for the STEP_END and rides with it and
// the next step's DISPATCH. A chain costs the task's log about one
// replicated write a step (it cost two while each start was published at
// once), and every record is still in the hub, as in the local file.
func TestHubReplicatedStartRidesWithEnd(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 3)
	e.startWorker("w1", e.cl.URLs(), nil)
	const steps = 8
	path := e.pipeline("chain", pipelineYAML(steps, "chain", "always", 1, bodyTrue))
	group := "raft " + remote.LogStream
	before := raftCommits(t, e.cl)[group]
	// A linger no body outlasts here, on a loaded machine too: the count
	// below is what a short body's chain costs.
	if err := e.run(t.Context(), path, e.cl.URLs(), func(ro *RunOptions) { ro.Hub.linger = time.Minute }); err != nil {
		t.Fatal(err)
	}
	writes := raftCommits(t, e.cl)[group] - before
	starts := 0
	for _, r := range e.logOf(e.task) {
		if r.EventType == eventlog.StepStart {
			starts++
		}
	}
	if starts != steps {
		t.Fatalf("the log holds %d STEP_STARTs, want %d", starts, steps)
	}
	if local, hub := e.localLog(e.task), e.hubLog(e.task); !slicesEqual(local, hub) {
		t.Fatalf("the local log differs from the hub's")
	}
	// Each step's DISPATCH carries the step before's start and end; the
	// run's first records and its last step's start, end and the task's
	// end are a few more publications.
	if limit := int64(steps + 4); writes > limit {
		t.Errorf("a chain of %d remote steps took %d replicated writes of its log, want at most %d: each start published alone?", steps, writes, limit)
	}
	t.Logf("%d replicated writes of the log for %d steps", writes, steps)
}

func slicesEqual(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// TestHubLogFencesStaleCoordinator: once another writer has moved the
// task's log on in the hub (a coordinator that took the task over while
// this one was paused), this one's next record is refused by the stream
// itself: it stops at once with a FencedError, writes nothing more to the
// hub, and dispatches nothing more; its local log is the hub's, record for
// record, up to the other writer's.
func TestHubLogFencesStaleCoordinator(t *testing.T) {
	needSeconds(t)
	hubNodes(t, func(t *testing.T, nodes int) {
		e := newHubEnv(t, nodes)
		tw := e.startWorker("w1", e.cl.URLs(), nil)
		path := filepath.Join(e.dir, "fence.yaml")
		os.WriteFile(path, []byte("task_name: fence\nsteps:\n  - id: a\n    command: sleep 1\n"+
			"  - id: b\n    command: touch b-ran\n    depends_on: [a]\n"), 0o644)
		done := make(chan error, 1)
		go func() { done <- e.run(t.Context(), path, e.cl.URLs(), nil) }()
		<-tw.starts
		// Another coordinator's record, appended where this one expects
		// its own next.
		c := e.client(e.cl.URLs())
		var theirs int64
		for range 50 {
			l, err := c.OpenLog(t.Context(), e.task)
			if err != nil {
				t.Fatal(err)
			}
			theirs = l.Last() + 1
			line, err := eventlog.Encode(&eventlog.Record{Seq: theirs, TaskID: e.task, EventType: eventlog.Warning,
				Status: eventlog.Running, Timestamp: eventlog.FormatTime(time.Now()), Message: "another coordinator"})
			if err != nil {
				t.Fatal(err)
			}
			if err = l.Append(t.Context(), theirs, line); err == nil {
				break
			}
			if _, ok := errors.AsType[*remote.FencedError](err); !ok {
				t.Fatal(err)
			}
		}
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			t.Fatal("the stale coordinator did not stop within a minute")
		}
		fenced, ok := errors.AsType[*remote.FencedError](err)
		if !ok || !strings.Contains(err.Error(), "another coordinator has written the task's log") {
			t.Fatalf("the stale coordinator ended with %v, want a FencedError", err)
		}
		if fenced.Theirs != theirs {
			t.Errorf("the refusal names the hub's last record seq %d, want %d", fenced.Theirs, theirs)
		}
		hub, local := e.hubLog(e.task), e.localLog(e.task)
		if int64(len(hub)) != theirs {
			t.Errorf("the hub's log has %d records after the other writer's seq %d: the stale coordinator wrote on", len(hub), theirs)
		}
		if !slicesEqual(local, hub[:theirs-1]) {
			t.Errorf("the stale coordinator's local log (%d records) is not the hub's up to the other writer's record (%d)", len(local), theirs-1)
		}
		for _, l := range local {
			if rec, _ := eventlog.Decode(bytes.TrimSuffix(l, []byte("\n"))); rec != nil && rec.StepID == "b" {
				t.Errorf("the stale coordinator recorded %s of step b", rec.EventType)
			}
		}
		time.Sleep(1500 * time.Millisecond) // a's body ends; b must not start
		if _, err := os.Stat(filepath.Join(e.dir, "b-ran")); err == nil {
			t.Error("step b ran: the stale coordinator dispatched it")
		}
	})
}

// TestHubLogAppendRace: two writers appending the same record seq with the
// same expectation: exactly one is stored, the other gets a FencedError
// (10071 on one node, 10164 while the winner's write is in flight on
// three), never a retry that waits; a writer whose first try was stored
// (its acknowledgement lost) recognises its own record and goes on.
func TestHubLogAppendRace(t *testing.T) {
	hubNodes(t, func(t *testing.T, nodes int) {
		e := newHubEnv(t, nodes)
		ctx := t.Context()
		a, b := e.client(e.cl.URLs()), e.client(e.cl.URLs())
		for round := range 20 {
			task := e.task + "_" + string(rune('a'+round))
			la, err := a.OpenLog(ctx, task)
			if err != nil {
				t.Fatal(err)
			}
			lb, err := b.OpenLog(ctx, task)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, l := range []*remote.Log{la, lb} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					line, _ := eventlog.Encode(&eventlog.Record{Seq: 1, TaskID: task, EventType: eventlog.Warning,
						Status: eventlog.Running, Timestamp: "2026-01-01T00:00:00Z", Message: string(rune('A' + i))})
					errs[i] = l.Append(ctx, 1, line)
				}()
			}
			wg.Wait()
			won := 0
			for _, err := range errs {
				if err == nil {
					won++
				} else if _, ok := errors.AsType[*remote.FencedError](err); !ok {
					t.Errorf("round %d: the loser got %v, want a FencedError", round, err)
				}
			}
			if won != 1 {
				t.Fatalf("round %d: %d writers stored record 1, want 1 (%v)", round, won, errs)
			}
		}
		// An append retried after its first try was stored: taken as stored.
		task := e.task + "_retry"
		first, _ := a.OpenLog(ctx, task)
		stale, _ := a.OpenLog(ctx, task) // the same writer, before it knew of its first try
		line, _ := eventlog.Encode(&eventlog.Record{Seq: 1, TaskID: task, EventType: eventlog.Warning, Status: eventlog.Running,
			Timestamp: "2026-01-01T00:00:00Z", Message: "once"})
		if err := first.Append(ctx, 1, line); err != nil {
			t.Fatal(err)
		}
		if err := stale.Append(ctx, 1, line); err != nil {
			t.Errorf("a retried append whose first try was stored: %v, want it taken as stored", err)
		}
		if got := len(e.hubLog(task)); got != 1 {
			t.Errorf("the hub holds %d records after a retried append, want 1", got)
		}
	})
}

// TestHubLogRebuildRefusesDamage: a coordinator that rebuilds a task's log
// from the hub checks every record's crc and that seq runs 1, 2, 3 ...: a
// log with a gap, or a damaged record, is refused, and nothing is run.
func TestHubLogRebuildRefusesDamage(t *testing.T) {
	e := newHubEnv(t, 1)
	path := e.dag("damaged", 1, 1, "true")
	c := e.client(e.cl.URLs())
	for _, tc := range []struct {
		name, want string
		lines      func(task string) [][]byte
	}{
		{"gap", "records are missing", func(task string) [][]byte {
			one, _ := eventlog.Encode(&eventlog.Record{Seq: 1, TaskID: task, EventType: eventlog.Warning, Status: eventlog.Running, Timestamp: "2026-01-01T00:00:00Z"})
			three, _ := eventlog.Encode(&eventlog.Record{Seq: 3, TaskID: task, EventType: eventlog.Warning, Status: eventlog.Running, Timestamp: "2026-01-01T00:00:00Z"})
			return [][]byte{one, three}
		}},
		{"crc", "is damaged at record 1", func(task string) [][]byte {
			one, _ := eventlog.Encode(&eventlog.Record{Seq: 1, TaskID: task, EventType: eventlog.Warning, Status: eventlog.Running, Timestamp: "2026-01-01T00:00:00Z"})
			return [][]byte{bytes.Replace(one, []byte("WARNING"), []byte("WARNINH"), 1)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			task := e.task + "_" + tc.name
			l, err := c.OpenLog(t.Context(), task)
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range tc.lines(task) {
				if err := l.Append(t.Context(), int64(i+1), line); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			err = e.run(ctx, path, e.cl.URLs(), func(ro *RunOptions) { ro.TaskID = task })
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("run on a damaged log in the hub: %v, want an error saying %q", err, tc.want)
			}
			if logs, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "logs", "task_"+task+"_*")); len(logs) != 0 {
				t.Errorf("a log was written from a damaged one: %v", logs)
			}
		})
	}
}

// TestHubLeaseLapsesByServer: a lease lives its TTL past its last renewal
// by the hub's clock: renewals keep its time to live (a KV Update would
// drop it, and the lease would never lapse), a second coordinator is
// refused while it lives, and once its holder stops renewing, the hub
// removes it and the second one takes it; the first one's next renewal is
// a LostError. No host's clock is compared with the entry's timestamp.
func TestHubLeaseLapsesByServer(t *testing.T) {
	needSeconds(t)
	hubNodes(t, func(t *testing.T, nodes int) {
		e := newHubEnv(t, nodes)
		ctx := t.Context()
		a, b := e.client(e.cl.URLs()), e.client(e.cl.URLs())
		const ttl = 2 * time.Second
		first, err := a.AcquireLease(ctx, e.task, remote.Holder{Host: "h1", PID: 1, StateDir: "/s"}, ttl)
		if err != nil {
			t.Fatal(err)
		}
		for range 4 { // past the TTL since it was taken
			time.Sleep(ttl / 3)
			if err := first.Renew(ctx); err != nil {
				t.Fatalf("renewal: %v", err)
			}
		}
		other := remote.Holder{Host: "h2", PID: 2, StateDir: "/s2"}
		if _, err := b.AcquireLease(ctx, e.task, other, ttl); !isHeld(err) {
			t.Fatalf("a second coordinator while the lease is renewed: %v, want a HeldError", err)
		}
		kv, err := b.JS.KeyValue(ctx, remote.LeaseBucket)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, err := kv.Get(ctx, remote.LeaseKey(e.task)); err != nil {
				break // lapsed on the hub
			}
			if time.Now().After(deadline) {
				t.Fatal("the lease is still in the hub 20s after its last renewal (TTL 2s): renewals dropped its time to live")
			}
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := b.AcquireLease(ctx, e.task, other, ttl); err != nil {
			t.Fatalf("taking a lapsed lease: %v", err)
		}
		if _, ok := errors.AsType[*remote.LostError](first.Renew(ctx)); !ok {
			t.Error("the first holder's renewal after the take-over is not a LostError")
		}
	})
}

func isHeld(err error) bool {
	_, ok := errors.AsType[*remote.HeldError](err)
	return ok
}

// TestHubLostMajorityStops: a hub that loses the majority of its nodes can
// store nothing; the coordinator, whose lease cannot be renewed, stops
// once the lease's TTL has passed since its last renewal — long before its
// give-up limit — saying why.
func TestHubLostMajorityStops(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	tw := e.startWorker("w1", e.cl.URLs(), nil)
	path := filepath.Join(e.dir, "majority.yaml")
	os.WriteFile(path, []byte("task_name: majority\nsteps:\n  - id: a\n    command: sleep 20\n"), 0o644)
	done := make(chan error, 1)
	go func() {
		done <- e.run(t.Context(), path, e.cl.URLs(), func(ro *RunOptions) {
			ro.Hub.LeaseTTL, ro.Hub.GiveUp = 3*time.Second, 5*time.Minute
		})
	}()
	<-tw.starts
	e.cl.Stop(0)
	e.cl.Stop(1)
	defer func() { e.cl.Restart(0); e.cl.Restart(1) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "could not be renewed for 3s") {
			t.Fatalf("the coordinator without a hub majority ended with %v, want it stopped for its lease", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the coordinator without a hub majority still ran 90s later (lease TTL 3s)")
	}
}

// TestHubLogReconciles: a log written without --hub gives the hub the
// records it lacks at the first run with --hub; a local log that lacks the
// hub's last records (a crash between the hub's acknowledgement and the
// local write) gets them back, so that a complete task is complete.
func TestHubLogReconciles(t *testing.T) {
	e := newHubEnv(t, 1)
	path := filepath.Join(e.dir, "rec.yaml")
	os.WriteFile(path, []byte("task_name: rec\nsteps:\n  - id: a\n    command: echo a >> ran\n"), 0o644)
	eng := New(Options{StateDir: filepath.Join(e.dir, ".apollo"), Workdir: e.dir, Stdout: io.Discard, Stderr: io.Discard, Progress: ProgressQuiet})
	if err := eng.Run(t.Context(), path, RunOptions{TaskID: e.task}); err != nil {
		t.Fatal(err)
	}
	local := e.localLog(e.task)
	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatal(err)
	}
	if hub := e.hubLog(e.task); !slicesEqual(hub, local) || !slicesEqual(e.localLog(e.task), local) {
		t.Fatalf("after a run with --hub on a log written without it, the hub holds %d records, the file %d, want the file's %d",
			len(hub), len(e.localLog(e.task)), len(local))
	}
	// The local file loses its last record (TASK_SUMMARY).
	logs, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "logs", "task_"+e.task+"_*.jsonl"))
	short := bytes.Join(local[:len(local)-1], nil)
	os.WriteFile(logs[0], short, 0o644)
	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatal(err)
	}
	if got := e.localLog(e.task); !slicesEqual(got, local) {
		t.Errorf("the local log has %d records after the run, want the hub's %d back and nothing run", len(got), len(local))
	}
	if b, _ := os.ReadFile(filepath.Join(e.dir, "ran")); string(b) != "a\n" {
		t.Errorf("step a ran %q, want once", b)
	}
}

// TestHubOutputRidesOnTheEnd: a remote step's short output reaches the
// coordinator's output file whole, carried by the attempt's end (one write
// to the hub, not a piece and then the end: the hub stores no piece of
// it); a long one comes as pieces first, its last piece with the end, and
// is whole too.
func TestHubOutputRidesOnTheEnd(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	e.startWorker("w1", e.cl.URLs(), nil)
	c := e.client(e.cl.URLs())
	for _, tc := range []struct{ step, command, want string }{
		{"short", "echo hello; echo world", "hello\nworld\n"},
		{"long", "head -c 300000 /dev/zero | tr '\\0' x", strings.Repeat("x", 300000)},
	} {
		e.task = "out_" + tc.step
		path := filepath.Join(e.dir, tc.step+".yaml")
		os.WriteFile(path, []byte(fmt.Sprintf("task_name: out\nsteps:\n  - id: %s\n    command: %q\n", tc.step, tc.command)), 0o644)
		if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(e.dir, ".apollo", "output", e.task, tc.step+".0.log")
		if b, err := os.ReadFile(out); err != nil || string(b) != tc.want {
			t.Errorf("%s holds %d bytes (%v), want the step's %d", out, len(b), err, len(tc.want))
		}
		s, err := c.JS.Stream(t.Context(), remote.OutputStream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(t.Context(), jetstream.WithSubjectFilter("apollo.out.*."+remote.Token(e.task)))
		if err != nil {
			t.Fatal(err)
		}
		if n := info.State.Msgs; tc.step == "short" && n != 0 {
			t.Errorf("the hub stored %d piece(s) of the short output apart from the end; want none", n)
		}
	}
}

// TestHubWorkerOpensItsBucketOnce: a worker looks up the hub's idem
// bucket once, not once per attempt: each lookup is a round trip to the
// hub before the attempt's body may start.
func TestHubWorkerOpensItsBucketOnce(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	c := e.client(e.cl.URLs())
	var mu sync.Mutex
	lookups := 0
	sub, err := c.NC.Subscribe("$JS.API.STREAM.INFO.KV_"+remote.IdemBucket, func(*nats.Msg) { mu.Lock(); lookups++; mu.Unlock() })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	c.NC.Flush()
	e.startWorker("w1", e.cl.URLs(), nil)
	path := filepath.Join(e.dir, "chain.yaml")
	yaml := "task_name: chain\nsteps:\n  - id: s0\n    command: 'true'\n"
	for i := 1; i < 8; i++ {
		yaml += fmt.Sprintf("  - id: s%d\n    command: 'true'\n    depends_on: [s%d]\n", i, i-1)
	}
	os.WriteFile(path, []byte(yaml), 0o644)
	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatal(err)
	}
	c.NC.Flush()
	mu.Lock()
	defer mu.Unlock()
	// Once by each client's set-up (the worker's and the coordinator's),
	// once when each opens it: not once more per attempt.
	if lookups > 4 {
		t.Fatalf("the idem bucket was looked up %d times for 8 remote attempts; want at most twice per client", lookups)
	}
}

// TestHubFeedTakesEventsFromRings: the hub republishes what it stores on
// the events stream, so a coordinator whose task has one pool takes each of
// its workers' events from that ring, without reading the stream, instead
// of reading each once it rang (and, before rings, trying as it was
// published, before a replicated stream had stored it, and again at its
// next poll).
func TestHubFeedTakesEventsFromRings(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	c := e.client(e.cl.URLs())
	sub, err := c.NC.SubscribeSync("$JS.API.STREAM.MSG.GET." + remote.EventsStream)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	sub.SetPendingLimits(-1, -1)
	c.NC.Flush()
	e.startWorker("w1", e.cl.URLs(), nil)
	path := filepath.Join(e.dir, "chain.yaml")
	os.WriteFile(path, []byte("task_name: chain\nsteps:\n  - id: a\n    command: 'true'\n  - id: b\n    command: 'true'\n    depends_on: [a]\n"+
		"  - id: c\n    command: 'true'\n    depends_on: [b]\n  - id: d\n    command: 'true'\n    depends_on: [c]\n"), 0o644)
	began := time.Now()
	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatal(err)
	}
	// A look every 2 s while nothing rings.
	polls := int(time.Since(began) / (2 * time.Second))
	c.NC.Flush() // the coordinator's reads reached the hub, and so this client
	time.Sleep(100 * time.Millisecond)
	c.NC.Flush()
	reads, _, err := sub.Pending()
	if err != nil {
		t.Fatal(err)
	}
	// 8 events (a start and an end per step), none read; the catch-up's
	// read that finds nothing, the feed's first look, the slow looks.
	if reads > 3+polls {
		t.Fatalf("the coordinator read the hub's events stream %d times for 8 events; want them taken from their rings", reads)
	}
	t.Logf("%d reads for 8 events", reads)
}

// TestHubFeedAfterDroppedRings: a feed whose bell overflowed (more
// events stored than it holds rings for while the coordinator was busy)
// still reads every event at once, not one per slow poll.
func TestHubFeedAfterDroppedRings(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	c := e.client(e.cl.URLs())
	feed, err := c.NewFeed(t.Context(), remote.EventsStream, remote.TaskEvents(e.task), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer feed.Close()
	const n = 1500 // more than the bell holds (1,024)
	for i := range n {
		if _, err := c.JS.PublishAsync("apollo.ev.default."+remote.Token(e.task), []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	<-c.JS.PublishAsyncComplete()
	// A bound that only a hang reaches: at one event per slow poll
	// (2 s) the last ones would take many minutes.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for i := range n {
		m, err := feed.Next(ctx)
		if err != nil {
			t.Fatalf("event %d of %d not read: %v", i+1, n, err)
		}
		if string(m.Data) != strconv.Itoa(i) {
			t.Fatalf("event %d reads %q", i+1, m.Data)
		}
	}
}
