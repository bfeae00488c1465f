package engine

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
	"apollo/engine/worker"
	"apollo/eventlog"
)

// The scenarios of the scale-out research's test plan (layer 1, D1–D9):
// a real hub cluster in this process, workers as goroutines running the
// real worker loop with their own connections, steps as real sh -c
// children. Liveness is 3 s here (30 s in production), so that a lost
// worker is noticed in seconds.

const testLiveness = 3 * time.Second

// hubEnv is one scenario: a cluster, a workspace, workers.
type hubEnv struct {
	t    *testing.T
	cl   *hubtest.Cluster
	dir  string // workspace; the state folder is dir/.apollo
	mu   sync.Mutex
	wks  []*testWorker
	task string
}

// needCluster skips a scenario under -short: each starts a cluster and
// waits out liveness deadlines, seconds apiece.
func needCluster(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: the hub's cluster scenarios take seconds each (go test ./engine -run Hub)")
	}
}

// needSeconds skips a one-node scenario under -short: each takes seconds
// (a hub and workers started, runs through them, or a lease's TTL).
// TestHubHappyPath and TestHubLogMirrorsLocal are -short's smoke tests of
// a run with a worker; the one-node scenarios under a second still run.
func needSeconds(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: this hub scenario takes seconds (a hub, workers, a lease's TTL); run without -short")
	}
}

// sharedHub is the 3-node cluster the scenarios share: a fresh cluster
// waits 4 to 9 s for its first leader election.
var sharedHub struct {
	once sync.Once
	cl   *hubtest.Cluster
	err  error
}

// newHubEnv gives a scenario a cluster of nodes (3: the shared one, with
// every node running) and a workspace; its task id is unique, since the
// hub outlives the scenario.
func newHubEnv(t *testing.T, nodes int) *hubEnv {
	t.Helper()
	e := &hubEnv{t: t, dir: t.TempDir(), task: strings.ReplaceAll(t.Name(), "/", "_")}
	if nodes != 3 {
		e.cl = hubtest.Start(t, nodes)
		return e
	}
	sharedHub.once.Do(func() { sharedHub.cl, sharedHub.err = hubtest.StartShared(3) })
	if sharedHub.err != nil {
		t.Fatalf("start a 3-node hub: %v", sharedHub.err)
	}
	e.cl = sharedHub.cl
	for i := range e.cl.Nodes {
		if err := e.cl.Restart(i); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func (e *hubEnv) client(urls string) *remote.Client {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: urls, Name: "test", CallTimeout: time.Second, GiveUp: 30 * time.Second})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// testWorker is a worker running in this process.
type testWorker struct {
	w      *worker.Worker
	c      *remote.Client
	stop   context.CancelFunc
	kill   chan struct{}
	done   chan struct{}
	starts chan started
}

type started struct {
	work *remote.Work
	pgid int
}

// startWorker starts a worker named name on urls; tune may change its
// options.
func (e *hubEnv) startWorker(name, urls string, tune func(o *worker.Options)) *testWorker {
	e.t.Helper()
	c := e.client(urls)
	tw := &testWorker{c: c, kill: make(chan struct{}), done: make(chan struct{}), starts: make(chan started, 100)}
	o := worker.Options{Client: c, Name: name, Slots: 4, Liveness: testLiveness, StateDir: filepath.Join(e.dir, ".worker-"+name),
		Workdir: e.dir, Log: io.Discard,
		Started: func(w *remote.Work, pgid int) {
			select {
			case tw.starts <- started{w, pgid}:
			default:
			}
		}}
	if tune != nil {
		tune(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := worker.New(ctx, o)
	if err != nil {
		e.t.Fatal(err)
	}
	tw.w = w
	rctx, stop := context.WithCancel(context.Background())
	tw.stop = stop
	go func() {
		defer close(tw.done)
		w.Run(rctx, tw.kill)
	}()
	e.t.Cleanup(func() {
		// Every worker winds down at once.
		e.mu.Lock()
		for _, o := range e.wks {
			o.stop()
		}
		e.mu.Unlock()
		stop()
		select {
		case <-tw.kill:
		default:
			close(tw.kill)
		}
		<-tw.done
	})
	e.mu.Lock()
	e.wks = append(e.wks, tw)
	e.mu.Unlock()
	return tw
}

// die makes a worker vanish as a machine does: its connection closed and
// the process group of its running step killed.
func (tw *testWorker) die(pgid int) {
	tw.c.Close()
	if pgid > 0 {
		syscall.Kill(-pgid, syscall.SIGKILL)
	}
}

// dag writes a pipeline of width×depth steps, each depending on the whole
// layer above, each writing a side-effect file named after its attempt and
// its worker before it sleeps.
func (e *hubEnv) dag(name string, width, depth int, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task_name: %s\nmax_dirty_restarts: 5\nsteps:\n", name)
	for d := range depth {
		for w := range width {
			fmt.Fprintf(&b, "  - id: s%d_%d\n    command: %q\n    cleanup_command: \"true\"\n", d, w,
				`touch "$APOLLO_ARTIFACTS_DIR/$APOLLO_STEP_ID.$APOLLO_RETRY_COUNT.$APOLLO_WORKER"; `+body)
			if d > 0 {
				var deps []string
				for x := range width {
					deps = append(deps, fmt.Sprintf("s%d_%d", d-1, x))
				}
				fmt.Fprintf(&b, "    depends_on: [%s]\n", strings.Join(deps, ", "))
			}
		}
	}
	path := filepath.Join(e.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// run runs a pipeline as a coordinator on urls.
func (e *hubEnv) run(ctx context.Context, path, urls string, tune func(ro *RunOptions)) error {
	ro := RunOptions{TaskID: e.task, Hub: HubOptions{URLs: urls, CallTimeout: time.Second, GiveUp: 20 * time.Second,
		LeaseTTL: 6 * time.Second}}
	if tune != nil {
		tune(&ro)
	}
	eng := New(Options{StateDir: filepath.Join(e.dir, ".apollo"), Workdir: e.dir, Stdout: io.Discard,
		Stderr: io.Discard, Progress: ProgressQuiet, KillGrace: 500 * time.Millisecond})
	return eng.Run(ctx, path, ro)
}

// runWithin runs a pipeline as e.run does, stopped if it takes longer
// than limit (a run that waits for an attempt nothing will end).
func (e *hubEnv) runWithin(limit time.Duration, path, urls string) error {
	ctx, cancel := context.WithTimeout(e.t.Context(), limit)
	defer cancel()
	return e.run(ctx, path, urls, nil)
}

// runDetached runs a pipeline as a coordinator that leaves its remote
// attempts running when it stops, and stops it once until returns: as a
// coordinator killed mid-run leaves them.
func (e *hubEnv) runDetached(path string, until func()) {
	ctx, cancel := context.WithCancel(e.t.Context())
	done := make(chan error, 1)
	go func() { done <- e.run(ctx, path, e.cl.URLs(), func(ro *RunOptions) { ro.Hub.detach = true }) }()
	until()
	cancel()
	<-done
}

// dropQueued removes the task's attempts from the hub's work queue, as a
// hand or a new log of the task does.
func (e *hubEnv) dropQueued() {
	e.t.Helper()
	steps, err := e.client(e.cl.URLs()).Stream(e.t.Context(), remote.StepsStream)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := steps.Purge(e.t.Context(), jetstream.WithPurgeSubject(remote.TaskSteps(e.task))); err != nil {
		e.t.Fatal(err)
	}
}

// logOf reads the task's log.
func (e *hubEnv) logOf(task string) []*eventlog.Record {
	e.t.Helper()
	logs, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "logs", "task_"+task+"_*.jsonl"))
	if len(logs) == 0 {
		e.t.Fatalf("no log of task %s", task)
	}
	recs, _, err := eventlog.ReadAll(logs[len(logs)-1], eventlog.ReadOptions{TaskID: task})
	if err != nil {
		e.t.Fatalf("the log does not read back: %v", err)
	}
	return recs
}

type attemptKey struct {
	step string
	n    int
}

// checkInvariants checks I1–I7 (hubtest.Check) on the task's log.
func (e *hubEnv) checkInvariants(task string, steps int) {
	e.t.Helper()
	logs, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "logs", "task_"+task+"_*.jsonl"))
	if len(logs) == 0 {
		e.t.Fatalf("no log of task %s", task)
	}
	for _, err := range hubtest.Check(logs[len(logs)-1], filepath.Join(e.dir, ".apollo", "artifacts", task), steps,
		e.client(e.cl.URLs())) {
		e.t.Error(err)
	}
}

func hasLost(recs []*eventlog.Record, k attemptKey) bool {
	for _, r := range recs {
		if r.EventType == eventlog.Lost && r.StepID == k.step && r.RetryCount == k.n {
			return true
		}
	}
	return false
}

func countType(recs []*eventlog.Record, typ string) int {
	n := 0
	for _, r := range recs {
		if r.EventType == typ {
			n++
		}
	}
	return n
}

// TestHubIdleWorkersWriteNothing: a worker with nothing to run holds one
// pull on the hub instead of renewing it every second. Each pull request
// is a replicated write when made and when done, so an idle pool of a
// 3-node hub commits next to nothing to its consumer's raft group; and a
// draining worker withdraws its pull rather than waiting it out.
func TestHubIdleWorkersWriteNothing(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	const pool = "idlepool"
	var wks []*testWorker
	for i := range 2 {
		wks = append(wks, e.startWorker(fmt.Sprintf("idle%d", i), e.cl.URLs(), func(o *worker.Options) { o.Pool = pool }))
	}
	group := "raft " + remote.StepsStream + "/" + remote.PoolConsumer(pool)
	time.Sleep(time.Second) // the workers' first pulls
	before := raftCommits(t, e.cl)
	time.Sleep(5 * time.Second)
	after := raftCommits(t, e.cl)
	if _, ok := after[group]; !ok {
		t.Fatalf("no raft group %q among %v", group, slices.Sorted(maps.Keys(after)))
	}
	// Pulls renewed every second would be about 2 × 5 × 2 = 20 entries.
	if d := after[group] - before[group]; d > 4 {
		t.Errorf("two idle workers committed %d entries to %s in 5 s; want at most 4", d, group)
	}
	began := time.Now()
	for _, tw := range wks {
		tw.stop()
	}
	for _, tw := range wks {
		select {
		case <-tw.done:
		case <-time.After(15 * time.Second): // half the wait of a pull
			t.Fatalf("an idle worker asked to drain was still waiting out its pull after %s", time.Since(began).Round(time.Second))
		}
	}
}

// TestHubHappyPath is D1: a 24-step DAG on three workers, all invariants,
// no loss. Under -short it runs on one node.
func TestHubHappyPath(t *testing.T) {
	nodes := 3
	if testing.Short() {
		nodes = 1
	}
	e := newHubEnv(t, nodes)
	for _, n := range []string{"w1", "w2", "w3"} {
		e.startWorker(n, e.cl.URLs(), nil)
	}
	path := e.dag("happy", 6, 4, "sleep 0.05")
	began := time.Now()
	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("run took %s", time.Since(began))
	e.checkInvariants(e.task, 24)
	if n := countType(e.logOf(e.task), eventlog.Lost); n != 0 {
		t.Errorf("%d LOST records, want none", n)
	}
}

// TestHubWorkerDies is D2: a worker dies mid-step (connection closed,
// step killed); its attempt is reported lost, cleaned up and run again on
// another worker, and the run completes.
func TestHubWorkerDies(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	victim := e.startWorker("victim", e.cl.URLs(), nil)
	path := e.dag("dies", 3, 2, "sleep 1")
	done := make(chan error, 1)
	go func() { done <- e.run(t.Context(), path, e.cl.URLs(), nil) }()
	s := <-victim.starts
	e.startWorker("w2", e.cl.URLs(), nil)
	victim.die(s.pgid)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.checkInvariants(e.task, 6)
	recs := e.logOf(e.task)
	if !hasLost(recs, attemptKey{s.work.Step, s.work.Attempt}) {
		t.Errorf("no LOST for %s attempt %d, whose worker died", s.work.Step, s.work.Attempt)
	}
}

// TestHubWorkerRunningFile: while a remote body runs, its process group is
// in the worker's running file (what a restarted worker ends after a
// crash); once the run is over, no group is.
func TestHubWorkerRunningFile(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	groups := func(o *worker.Options) map[string]int {
		files, _ := filepath.Glob(filepath.Join(o.StateDir, "workers", "*.json"))
		all := map[string]int{}
		for _, f := range files {
			// The journal: a line per attempt added or removed.
			b, _ := os.ReadFile(f)
			for line := range bytes.Lines(b) {
				var l struct {
					Op, Tag string
					PGID    int
				}
				if json.Unmarshal(line, &l) != nil {
					continue
				}
				switch l.Op {
				case "add":
					all[l.Tag] = l.PGID
				case "remove":
					delete(all, l.Tag)
				}
			}
		}
		return all
	}
	var opts *worker.Options
	var during atomic.Int64
	e.startWorker("w1", e.cl.URLs(), func(o *worker.Options) {
		opts = o
		o.Started = func(w *remote.Work, pgid int) {
			for _, g := range groups(o) {
				if g == pgid {
					during.Add(1)
				}
			}
		}
	})
	path := e.dag("running", 1, 3, "true")
	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatal(err)
	}
	if n := during.Load(); n != 3 {
		t.Errorf("the running file named the body's group at %d of 3 starts", n)
	}
	// The worker takes a group out while it reports the end, which may
	// be after the coordinator has it.
	left := groups(opts)
	for deadline := time.Now().Add(5 * time.Second); len(left) != 0 && time.Now().Before(deadline); left = groups(opts) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) != 0 {
		t.Errorf("after the run the running file still names %v", left)
	}
}

// TestHubLeaderDies is D3: the node leading the work queue is shut down
// mid-run and restarted on its store two seconds later; nothing is lost.
func TestHubLeaderDies(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	tw := e.startWorker("w1", e.cl.URLs(), nil)
	e.startWorker("w2", e.cl.URLs(), nil)
	path := e.dag("leader", 4, 3, "sleep 0.5")
	done := make(chan error, 1)
	go func() { done <- e.run(t.Context(), path, e.cl.URLs(), nil) }()
	for range 3 {
		<-tw.starts
	}
	leader := e.cl.Leader(remote.StepsStream)
	if leader < 0 {
		t.Fatal("no leader of the work queue")
	}
	e.cl.Stop(leader)
	time.Sleep(2 * time.Second)
	if err := e.cl.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.checkInvariants(e.task, 12)
}

// TestHubEndBeforeAck is D4: a worker dies after its end is stored and
// before its acknowledgement; the redelivery is not a rerun.
func TestHubEndBeforeAck(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	var once atomic.Bool
	var victim *testWorker
	victim = e.startWorker("victim", e.cl.URLs(), func(o *worker.Options) {
		o.AfterEnd = func(w *remote.Work) {
			if once.CompareAndSwap(false, true) {
				victim.c.Close() // the end is stored; the ack never goes
			}
		}
	})
	e.startWorker("w2", e.cl.URLs(), nil)
	path := e.dag("ack", 2, 2, "sleep 0.2")
	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatal(err)
	}
	e.checkInvariants(e.task, 4)
	files, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "artifacts", e.task, "*"))
	if len(files) != 4 {
		t.Errorf("%d executions of 4 steps, want 4: %v", len(files), files)
	}
}

// TestHubCoordinatorRestarts is D5: the coordinator stops while attempts
// run; they finish meanwhile; a new coordinator on the same state folder
// takes in their ends once and runs the rest, rerunning nothing.
func TestHubCoordinatorRestarts(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	tw := e.startWorker("w1", e.cl.URLs(), nil)
	path := e.dag("restart", 3, 2, "sleep 1.5")
	e.runDetached(path, func() { <-tw.starts })
	time.Sleep(2 * time.Second) // the first layer ends with no coordinator
	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatal(err)
	}
	e.checkInvariants(e.task, 6)
	files, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "artifacts", e.task, "*"))
	if len(files) != 6 {
		t.Errorf("%d executions of 6 steps, want 6 (nothing rerun): %v", len(files), files)
	}
}

// TestHubSecondCoordinator is D6: a second coordinator of the same task
// (another state folder, as on another host) is refused, naming the first
// one's host and pid, and dispatches nothing.
func TestHubSecondCoordinator(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	tw := e.startWorker("w1", e.cl.URLs(), nil)
	path := e.dag("second", 1, 2, "sleep 1")
	done := make(chan error, 1)
	go func() { done <- e.run(t.Context(), path, e.cl.URLs(), nil) }()
	<-tw.starts
	other := t.TempDir()
	eng := New(Options{StateDir: filepath.Join(other, ".apollo"), Workdir: other, Stdout: io.Discard, Progress: ProgressQuiet})
	err := eng.Run(t.Context(), path, RunOptions{TaskID: e.task, Hub: HubOptions{URLs: e.cl.URLs(), CallTimeout: time.Second, GiveUp: 10 * time.Second}})
	var held *remote.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("second coordinator: %v, want a HeldError", err)
	}
	host, _ := os.Hostname()
	if held.Holder.PID != os.Getpid() || held.Holder.Host != host || !strings.Contains(err.Error(), host) {
		t.Errorf("second coordinator's error %q does not name host %s and pid %d", err, host, os.Getpid())
	}
	if logs, _ := filepath.Glob(filepath.Join(other, ".apollo", "logs", "*.jsonl")); len(logs) != 0 {
		t.Errorf("the second coordinator wrote %v", logs)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	e.checkInvariants(e.task, 2)
}

// TestHubPartitionedWorkerFences is D8: a worker cut off by a partition (a
// proxy that stops forwarding) ends its step itself; the attempt is
// reported lost and runs again elsewhere; the cut-off worker reports no
// end.
func TestHubPartitionedWorkerFences(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	proxy := hubtest.NewProxy(t, strings.TrimPrefix(strings.Split(e.cl.URLs(), ",")[0], "nats://"))
	cut := e.startWorker("cut", proxy.URL(), func(o *worker.Options) { o.Slots = 1 })
	path := filepath.Join(e.dir, "part.yaml")
	os.WriteFile(path, []byte(`task_name: part
steps:
  - id: long
    command: 'sleep 5; touch "$APOLLO_ARTIFACTS_DIR/$APOLLO_STEP_ID.$APOLLO_RETRY_COUNT.$APOLLO_WORKER"'
    cleanup_command: "true"
`), 0o644)
	done := make(chan error, 1)
	go func() { done <- e.run(t.Context(), path, e.cl.URLs(), nil) }()
	s := <-cut.starts
	proxy.Block()
	e.startWorker("w2", e.cl.URLs(), nil)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(-s.pgid, 0) == nil {
		t.Errorf("the partitioned worker's step (pgid %d) still runs", s.pgid)
	}
	e.checkInvariants(e.task, 1)
	recs := e.logOf(e.task)
	if !hasLost(recs, attemptKey{"long", 0}) {
		t.Error("no LOST for the partitioned worker's attempt")
	}
	files, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "artifacts", e.task, "*"))
	if len(files) != 1 || !strings.HasPrefix(filepath.Base(files[0]), "long.1.") {
		t.Errorf("executions %v, want only attempt 1's", files)
	}
}

// TestHubCallDuringFailover is D9: a call to the hub made while the node the
// client is connected to goes down is answered, within twice its deadline,
// by another node (the research saw such a call hang for 88 s).
func TestHubCallDuringFailover(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	// Connected to the first node only: the others are learnt from it.
	first := strings.Split(e.cl.URLs(), ",")[0]
	ctx := t.Context()
	c, err := remote.Connect(ctx, remote.Config{URLs: first, Name: "d9", CallTimeout: 2 * time.Second, GiveUp: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	node := 0
	e.cl.Stop(node)
	began := time.Now()
	err = c.Do(ctx, "create a consumer", func(ctx context.Context) error {
		_, err := c.JS.CreateOrUpdateConsumer(ctx, remote.EventsStream, jetstream.ConsumerConfig{Durable: "d9",
			AckPolicy: jetstream.AckExplicitPolicy})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took > 2*2*time.Second+time.Second {
		t.Errorf("the call took %s through the fail-over; its deadline is 2s", took)
	}
}

// TestHubTorture runs a 12-step DAG again and again under a random fault —
// a worker killed, a hub node stopped and restarted, a worker partitioned,
// the coordinator stopped and started again — checking the invariants
// after each run. It takes minutes: APOLLO_LONG=1 (APOLLO_SEED to replay a
// schedule, APOLLO_ROUNDS for its length, default 20).
func TestHubTorture(t *testing.T) {
	if os.Getenv("APOLLO_LONG") == "" {
		t.Skip("set APOLLO_LONG=1 for the random-fault torture (minutes)")
	}
	seed := time.Now().UnixNano()
	if s := os.Getenv("APOLLO_SEED"); s != "" {
		fmt.Sscan(s, &seed)
	}
	rounds := 20
	if s := os.Getenv("APOLLO_ROUNDS"); s != "" {
		fmt.Sscan(s, &rounds)
	}
	t.Logf("seed %d (APOLLO_SEED=%d to replay), %d rounds", seed, seed, rounds)
	rnd := newRand(seed)
	for round := range rounds {
		t.Run(fmt.Sprintf("round%02d", round), func(t *testing.T) {
			e := newHubEnv(t, 3)
			fault := rnd.IntN(4)
			proxy := hubtest.NewProxy(t, strings.TrimPrefix(strings.Split(e.cl.URLs(), ",")[0], "nats://"))
			victimURL := e.cl.URLs()
			if fault == 2 {
				victimURL = proxy.URL()
			}
			victim := e.startWorker("victim", victimURL, nil)
			e.startWorker("w2", e.cl.URLs(), nil)
			path := e.dag("torture", 4, 3, "sleep 0.5")
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			go func() { done <- e.run(ctx, path, e.cl.URLs(), func(ro *RunOptions) { ro.Hub.detach = true }) }()
			s := <-victim.starts
			switch fault {
			case 0:
				t.Log("fault: a worker dies mid-step")
				victim.die(s.pgid)
			case 1:
				i := rnd.IntN(3)
				t.Logf("fault: node %d stopped for 2s", i)
				e.cl.Stop(i)
				time.Sleep(2 * time.Second)
				if err := e.cl.Restart(i); err != nil {
					t.Fatal(err)
				}
			case 2:
				t.Log("fault: a worker is partitioned")
				proxy.Block()
			case 3:
				t.Log("fault: the coordinator stops and starts again")
				cancel()
				<-done
				go func() { done <- e.run(t.Context(), path, e.cl.URLs(), nil) }()
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			cancel()
			e.checkInvariants(e.task, 12)
		})
	}
}

func newRand(seed int64) *rand.Rand { return rand.New(rand.NewPCG(uint64(seed), 0)) }

// TestHubLostRaceOnR3 is issue 27: on a replicated (R3) bucket a lost
// compare-and-set comes back as error 10164, not 10071. A coordinator whose
// lease another took over must learn it at its next renewal (a LostError),
// not retry it as a transient error until the hub's give-up limit; the
// idem markers' gate must know a lost race too.
func TestHubLostRaceOnR3(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	ctx := t.Context()
	a := e.client(e.cl.URLs())
	b := e.client(e.cl.URLs())
	me := remote.Holder{Host: "h", PID: 1, StateDir: "/s"}
	first, err := a.AcquireLease(ctx, e.task, me, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// The same host and state folder: the old holder is dead, taken over at once.
	if _, err := b.AcquireLease(ctx, e.task, remote.Holder{Host: "h", PID: 2, StateDir: "/s"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	err = first.Renew(ctx)
	if _, ok := errors.AsType[*remote.LostError](err); !ok {
		t.Fatalf("renewal of a lease taken over: %v (after %s), want a LostError", err, time.Since(began).Round(time.Millisecond))
	}
	// Writers racing on one key: the losers' refusals come back as 10071
	// or, while the winner's write is in flight, as 10164.
	kv, err := a.JS.KeyValue(ctx, remote.IdemBucket)
	if err != nil {
		t.Fatal(err)
	}
	key := remote.Token(e.task) + ".race"
	inFlight := 0
	for round := 0; round < 20 && inFlight == 0; round++ {
		rev, err := kv.Put(ctx, key, []byte("start"))
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make([]error, 16)
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = kv.Update(ctx, key, []byte(fmt.Sprint(i)), rev)
			}()
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			var api *jetstream.APIError
			switch {
			case err == nil:
				won++
			case !remote.LostRace(err):
				t.Errorf("a writer that lost the race: %v, not recognised as a lost race", err)
			case errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant:
				inFlight++
			}
		}
		if won != 1 {
			t.Errorf("round %d: %d writers won, want 1", round, won)
		}
	}
	t.Logf("%d refusals while the winner's write was in flight (10164)", inFlight)
	if remote.LostRace(errors.New("nats: timeout")) || remote.LostRace(nil) {
		t.Error("a time-out taken for a lost race")
	}
}

// TestHubUntakenSaysSo is issue 25: an attempt no worker takes (its pool
// has none) is said on the board and in the log, instead of a run that
// waits mute.
func TestHubUntakenSaysSo(t *testing.T) {
	nodes := 3
	if testing.Short() {
		nodes = 1
	}
	e := newHubEnv(t, nodes)
	path := filepath.Join(e.dir, "untaken.yaml")
	os.WriteFile(path, []byte("task_name: untaken\nsteps:\n  - id: a\n    command: \"true\"\n    pool: nobody\n"), 0o644)
	var out syncBuffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		ro := RunOptions{TaskID: e.task, Hub: HubOptions{URLs: e.cl.URLs(), CallTimeout: time.Second, GiveUp: 20 * time.Second,
			LeaseTTL: 6 * time.Second, Untaken: 200 * time.Millisecond, detach: true}}
		eng := New(Options{StateDir: filepath.Join(e.dir, ".apollo"), Workdir: e.dir, Stdout: &out,
			Stderr: io.Discard, Progress: ProgressPlain, KillGrace: 500 * time.Millisecond})
		done <- eng.Run(ctx, path, ro)
	}()
	const want = "attempt 0 was dispatched to pool nobody"
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	<-done
	if !strings.Contains(out.String(), want) || !strings.Contains(out.String(), "no worker of pool nobody has ever pulled from this hub") {
		t.Fatalf("the board never said that no worker took the attempt:\n%s", out.String())
	}
	warnings := 0
	for _, r := range e.logOf(e.task) {
		if r.EventType == eventlog.Warning && strings.Contains(r.Message, want) {
			warnings++
		}
	}
	if warnings != 1 {
		t.Errorf("%d WARNINGs that no worker took the attempt, want 1", warnings)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestHubSecretNeverWritten: the attempts' secrets travel in their
// messages only: no log, snapshot, output file or line the coordinator or a
// worker prints holds one.
func TestHubSecretNeverWritten(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 3)
	var workerLog, out syncBuffer
	e.startWorker("w1", e.cl.URLs(), func(o *worker.Options) { o.Log = &workerLog })
	path := filepath.Join(e.dir, "secret.yaml")
	os.WriteFile(path, []byte(`task_name: secret
steps:
  - id: a
    command: env; echo done
  - id: b
    lua: |
      local idem = require("apollo.idem")
      return idem.once("m", function() return "x" end)
    depends_on: [a]
`), 0o644)
	ro := RunOptions{TaskID: e.task, Hub: HubOptions{URLs: e.cl.URLs(), CallTimeout: time.Second, GiveUp: 20 * time.Second, LeaseTTL: 6 * time.Second}}
	eng := New(Options{StateDir: filepath.Join(e.dir, ".apollo"), Workdir: e.dir, Stdout: &out, Stderr: &out,
		Progress: ProgressPlain, KillGrace: 500 * time.Millisecond})
	if err := eng.Run(t.Context(), path, ro); err != nil {
		t.Fatal(err)
	}
	recs := e.logOf(e.task)
	run := recs[0].Start.RunNonce
	keyHex, err := os.ReadFile(filepath.Join(e.dir, ".apollo", "hub", e.task, run+".key"))
	if err != nil {
		t.Fatalf("the run's key: %v", err)
	}
	key, _ := hex.DecodeString(strings.TrimSpace(string(keyHex)))
	var secrets []string
	for _, step := range []string{"a", "b"} {
		secrets = append(secrets, remote.AttemptSecret(key, remote.DispatchID(run, e.task, step, 0)))
	}
	look := func(what, text string) {
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s holds an attempt's secret", what)
			}
		}
	}
	look("the run's output", out.String())
	look("the worker's log", workerLog.String())
	filepath.WalkDir(e.dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && !strings.HasSuffix(p, ".key") {
			b, _ := os.ReadFile(p)
			look(p, string(b))
		}
		return nil
	})
	if countType(recs, eventlog.StepEnd) != 2 {
		t.Errorf("%d STEP_ENDs, want 2", countType(recs, eventlog.StepEnd))
	}
}

// TestHubFreshRun is issue 25 on three nodes: a task run, then a --fresh
// run of the same task id within the hub's duplicate window, then another
// in a replaced state folder: each completes, each step started and ended
// once in each log.
func TestHubFreshRun(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	e.startWorker("w1", e.cl.URLs(), nil)
	path := e.dag("fresh", 2, 2, "true")
	for i, tune := range []func(ro *RunOptions){nil, func(ro *RunOptions) { ro.Fresh = true }, nil} {
		if i == 2 {
			os.RemoveAll(filepath.Join(e.dir, ".apollo"))
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		err := e.run(ctx, path, e.cl.URLs(), tune)
		cancel()
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
		recs := e.logOf(e.task)
		if s, n := countType(recs, eventlog.StepStart), countType(recs, eventlog.StepEnd); s != 4 || n != 4 {
			t.Errorf("run %d: %d STEP_STARTs and %d STEP_ENDs, want 4 each", i+1, s, n)
		}
	}
}

// TestHubKeyLost: a coordinator restarted on its log whose run key is gone
// cannot tell its attempts' reports from forgeries: it records the
// attempts in flight LOST, cleans them up, runs their next attempts and
// completes.
func TestHubKeyLost(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	tw := e.startWorker("w1", e.cl.URLs(), nil)
	path := e.dag("keylost", 2, 1, "sleep 1.5")
	e.runDetached(path, func() { <-tw.starts })
	keys, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "hub", e.task, "*.key"))
	if len(keys) != 1 {
		t.Fatalf("run keys %v, want one", keys)
	}
	os.Remove(keys[0])
	if err := e.runWithin(time.Minute, path, e.cl.URLs()); err != nil {
		t.Fatal(err)
	}
	recs := e.logOf(e.task)
	said, cleaned := false, 0
	for _, r := range recs {
		said = said || r.EventType == eventlog.Lost && strings.Contains(r.ErrorMessage, "hub key") &&
			strings.Contains(r.ErrorMessage, "treated as cut off")
		if r.EventType == eventlog.Cleanup && r.Dirty {
			cleaned++
		}
	}
	if !said {
		t.Error("no LOST saying that the run's key was missing")
	}
	if cleaned == 0 {
		t.Error("no attempt in flight was cleaned up as cut off")
	}
	if n := countType(recs, eventlog.StepEnd); n != 2 {
		t.Errorf("%d STEP_ENDs, want 2", n)
	}
}

// TestHubLostThenCoordinatorDies: a coordinator takes in an attempt's
// LOST and dies before its cleanup. The next one on the log finds the
// attempt lost, not in flight: it cleans up and runs the next attempt,
// instead of waiting for the lost one (whose message the hub dropped and
// would not take again under the same id).
func TestHubLostThenCoordinatorDies(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	urls := e.cl.URLs()
	victim := e.startWorker("victim", urls, nil)
	path := e.dag("lostdies", 1, 1, `if [ "$APOLLO_RETRY_COUNT" = 0 ]; then sleep 60; fi`)
	var s started
	e.runDetached(path, func() { s = <-victim.starts })
	victim.die(s.pgid)
	e.startWorker("w2", urls, nil) // takes the redelivery and reports it lost
	lostSeq := e.waitLostEvent(30 * time.Second)

	// What the dead coordinator wrote last: the LOST, taken in from the
	// hub's event at lostSeq.
	logs, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "logs", "task_"+e.task+"_*.jsonl"))
	w, err := eventlog.Open(logs[0], eventlog.WriterOptions{TaskID: e.task}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AppendDurable(&eventlog.Record{EventType: eventlog.Lost, StepID: "s0_0", Status: eventlog.Running,
		RetryCount: 0, ErrorMessage: "attempt 0 lost", SrcSeq: int64(lostSeq)}); err != nil {
		t.Fatal(err)
	}
	w.Close()

	if err := e.runWithin(time.Minute, path, urls); err != nil {
		t.Fatalf("the run after the LOST: %v (it waited for the lost attempt)", err)
	}
	recs := e.logOf(e.task)
	cleaned, ended := 0, -1
	for _, r := range recs {
		if r.EventType == eventlog.Cleanup && r.Dirty && r.StepID == "s0_0" {
			cleaned++
		}
		if r.EventType == eventlog.StepEnd && r.Status == eventlog.Success {
			ended = r.RetryCount
		}
	}
	if cleaned != 1 || ended != 1 {
		t.Errorf("%d cleanup(s) of the lost attempt and a SUCCESS by attempt %d, want 1 cleanup and attempt 1", cleaned, ended)
	}
	if n := countType(recs, eventlog.Lost); n != 1 {
		t.Errorf("%d LOST records, want 1", n)
	}
}

// TestHubQueuedMessageVanished: a coordinator resumes a log whose attempt
// in flight has no message in the hub any more (dropped by hand), and no
// worker reported it: the attempt is recorded LOST and the next one runs,
// instead of a wait for an end that never comes.
func TestHubQueuedMessageVanished(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	urls := e.cl.URLs()
	path := e.dag("vanished", 1, 1, "true")
	c := e.client(urls)
	e.runDetached(path, func() {
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, _, ok, err := c.Queued(t.Context(), remote.DefaultPool, e.task, "s0_0"); err == nil && ok {
				return
			}
		}
	})
	e.dropQueued()
	e.startWorker("w1", urls, nil)
	if err := e.runWithin(time.Minute, path, urls); err != nil {
		t.Fatalf("the run after the message vanished: %v", err)
	}
	recs := e.logOf(e.task)
	if !hasLost(recs, attemptKey{"s0_0", 0}) {
		t.Error("no LOST for attempt 0, whose message vanished")
	}
	if n := countType(recs, eventlog.StepEnd); n != 1 {
		t.Errorf("%d STEP_ENDs, want 1", n)
	}
}

// TestHubStartedAttemptNeverPublishedAgain: an attempt whose worker
// reported its start, then died, and whose message the hub then dropped,
// is recorded LOST by the coordinator that adopts it, never published
// again: after a hub node restarts, the hub's duplicate window no longer
// knows the first publication, and a second one would run the attempt's
// body a second time.
func TestHubStartedAttemptNeverPublishedAgain(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 1)
	urls := e.cl.URLs()
	victim := e.startWorker("victim", urls, nil)
	path := e.dag("again", 1, 1, `if [ "$APOLLO_RETRY_COUNT" = 0 ]; then sleep 60; fi`)
	var s started
	e.runDetached(path, func() { s = <-victim.starts })
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if ran, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "artifacts", e.task, "s0_0.0.*")); len(ran) > 0 {
			break // its body runs
		}
	}
	victim.die(s.pgid)
	e.dropQueued()
	e.cl.Stop(0)
	if err := e.cl.Restart(0); err != nil {
		t.Fatal(err)
	}
	e.startWorker("w2", urls, nil)
	if err := e.runWithin(time.Minute, path, urls); err != nil {
		t.Fatalf("the run after the message was dropped: %v", err)
	}
	ran, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "artifacts", e.task, "s0_0.0.*"))
	if len(ran) != 1 {
		t.Errorf("attempt 0 ran its body %d times (%v), want once", len(ran), ran)
	}
	recs := e.logOf(e.task)
	if !hasLost(recs, attemptKey{"s0_0", 0}) {
		t.Error("no LOST for attempt 0, whose message was dropped after its start")
	}
	if n := countType(recs, eventlog.StepEnd); n != 1 {
		t.Errorf("%d STEP_ENDs, want 1", n)
	}
}

// waitLostEvent waits for a worker's report that an attempt of the task
// was lost, and returns its hub sequence.
func (e *hubEnv) waitLostEvent(within time.Duration) uint64 {
	e.t.Helper()
	c := e.client(e.cl.URLs())
	s, err := c.Stream(e.t.Context(), remote.EventsStream)
	if err != nil {
		e.t.Fatal(err)
	}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		m, err := s.GetLastMsgForSubject(e.t.Context(), remote.EventSubject(remote.DefaultPool, e.task))
		var ev remote.Event
		if err == nil && json.Unmarshal(m.Data, &ev) == nil && ev.Type == remote.EventLost {
			return m.Sequence
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("no worker reported the lost attempt within %s", within)
	return 0
}

// TestHubFreshDropsEarlierRun: an attempt an interrupted run left queued
// (its pool had no worker) is dropped when a new log of the task starts
// (--fresh): a worker that comes later runs the new run's attempt only,
// never the abandoned run's.
func TestHubFreshDropsEarlierRun(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 3)
	path := filepath.Join(e.dir, "late.yaml")
	os.WriteFile(path, []byte("task_name: late\nsteps:\n  - id: a\n    command: echo ran >> \"$APOLLO_ARTIFACTS_DIR/ran\"\n    pool: late\n"), 0o644)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.run(ctx, path, e.cl.URLs(), func(ro *RunOptions) { ro.Hub.detach = true }) }()
	deadline := time.Now().Add(30 * time.Second)
	dispatched := func(logs int) {
		for time.Now().Before(deadline) {
			found, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "logs", "task_"+e.task+"_*.jsonl"))
			if len(found) == logs && countType(e.logOf(e.task), eventlog.Dispatch) > 0 {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("no DISPATCH within 30s")
	}
	dispatched(1)
	cancel()
	<-done
	rctx, rcancel := context.WithTimeout(t.Context(), time.Minute)
	defer rcancel()
	go func() { done <- e.run(rctx, path, e.cl.URLs(), func(ro *RunOptions) { ro.Fresh = true }) }()
	dispatched(2) // the new log dropped the old attempt before it dispatched its own
	e.startWorker("late", e.cl.URLs(), func(o *worker.Options) { o.Pool = "late" })
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(e.dir, ".apollo", "artifacts", e.task, "ran")
	// The queue is empty once the new run ends unless an old attempt is
	// still there; give a worker that took one the time to run it.
	c := e.client(e.cl.URLs())
	s, err := c.Stream(t.Context(), remote.StepsStream)
	if err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(deadline.Add(30 * time.Second)) {
		info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(remote.TaskSteps(e.task)))
		if err == nil && len(info.State.Subjects) == 0 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	b, _ := os.ReadFile(ran)
	if n := strings.Count(string(b), "ran"); n != 1 {
		t.Errorf("step a ran %d times, want once: the abandoned run's attempt ran too", n)
	}
}

// TestHubTaskAcrossPools: a task whose steps go to two pools takes in the
// events of both, in the hub's order, each step run by its pool's worker
// (its feed reads each event, since a ring of one pool's subject cannot
// show that the other's holds nothing before it); a task whose steps all
// go to one pool that is not the run's default takes its events from the
// rings of that pool's subject.
func TestHubTaskAcrossPools(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	e.startWorker("wp1", e.cl.URLs(), func(o *worker.Options) { o.Pool = "p1" })
	e.startWorker("wp2", e.cl.URLs(), func(o *worker.Options) { o.Pool = "p2" })
	for _, tc := range []struct {
		name  string
		pools []string
	}{
		{"two", []string{"p1", "p2", "p1", "p2"}},
		{"one", []string{"p2", "p2", "p2", "p2"}},
	} {
		var b strings.Builder
		b.WriteString("task_name: pools\nsteps:\n")
		for i, p := range tc.pools {
			fmt.Fprintf(&b, "  - id: s%d\n    command: 'true'\n    pool: %s\n", i, p)
			if i > 0 {
				fmt.Fprintf(&b, "    depends_on: [s%d]\n", i-1)
			}
		}
		path := filepath.Join(e.dir, tc.name+".yaml")
		os.WriteFile(path, []byte(b.String()), 0o644)
		e.task = "pools-" + tc.name
		if err := e.runWithin(time.Minute, path, e.cl.URLs()); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		recs := e.logOf(e.task)
		ran := map[string]string{}
		for _, r := range recs {
			if r.EventType == eventlog.StepEnd && r.Status == eventlog.Success {
				ran[r.StepID] = r.Worker
			}
		}
		for i, p := range tc.pools {
			id := fmt.Sprintf("s%d", i)
			if w, ok := ran[id]; !ok || !strings.Contains(w, "w"+p) {
				t.Errorf("%s: step %s of pool %s: ended SUCCESS by worker %q (found: %v)", tc.name, id, p, w, ok)
			}
		}
		if n := countType(recs, eventlog.Warning); n != 0 {
			t.Errorf("%s: %d WARNING records", tc.name, n)
		}
	}
}

// TestHubEndBetweenPlanAndAdoption: a coordinator that takes over plans
// its nodes from the log, then lists the attempts in flight to adopt. An
// end that the hub stores between the two is taken in after the list (the
// ingestion waits), so the node adopts the attempt and takes its end,
// instead of being planned to run again with no attempt left to adopt:
// the step ran once, recorded done once (a nemesis run found it done
// twice, attempts 0 and 1).
func TestHubEndBetweenPlanAndAdoption(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	tw := e.startWorker("w1", e.cl.URLs(), nil)
	path := e.dag("plan", 1, 1, "sleep 1")
	e.runDetached(path, func() { <-tw.starts })
	c := e.client(e.cl.URLs())
	ended := func() bool {
		s, err := c.Stream(t.Context(), remote.EventsStream)
		if err != nil {
			return false
		}
		m, err := s.GetLastMsgForSubject(t.Context(), remote.EventSubject("default", e.task))
		if err != nil {
			return false
		}
		var ev remote.Event
		return json.Unmarshal(m.Data, &ev) == nil && ev.Type == remote.EventEnd
	}
	if ended() {
		t.Fatal("the attempt ended before the second coordinator started; make its body longer")
	}
	err := e.run(t.Context(), path, e.cl.URLs(), func(ro *RunOptions) {
		ro.Hub.afterPlan = func() {
			for deadline := time.Now().Add(20 * time.Second); !ended(); time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Error("the worker's end was not stored within 20s")
					return
				}
			}
			time.Sleep(300 * time.Millisecond) // time for an ingestion not held to take it in
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	e.checkInvariants(e.task, 1)
	files, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "artifacts", e.task, "*"))
	if len(files) != 1 {
		t.Errorf("%d executions of 1 step, want 1: %v", len(files), files)
	}
	if n := countType(e.logOf(e.task), eventlog.Dispatch); n != 1 {
		t.Errorf("%d DISPATCH records, want 1: the ended attempt was dispatched again", n)
	}
}
