package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"apollo/engine/hubtest"
	"apollo/engine/internal/testbin"
	"apollo/engine/pipeline"
	"apollo/engine/remote"
	"apollo/eventlog"
)

// The knobs of the nemesis, from the environment.
const (
	// envSeed replays a schedule: the seed every run prints.
	envSeed = "APOLLO_NEMESIS_SEED"
	// envDuration is how long faults are injected (default 1 minute; with
	// -short the nemesis is skipped unless it is set): the opt-in long run
	// sets, say, 30m.
	envDuration = "APOLLO_NEMESIS_DURATION"
	// envDeleteState=0 leaves out the fault "a killed coordinator's state
	// folder is gone" (the next coordinator starts in an empty one, half
	// the time), which the task's log in the hub (docs/spec.md §8.8) lets
	// a run survive.
	envDeleteState = "APOLLO_NEMESIS_DELETE_STATE"
	// envKeep keeps the world's folder (process outputs, logs, effects)
	// and prints where it is.
	envKeep = "APOLLO_NEMESIS_KEEP"
)

// The deadlines the processes run with: short, so that faults longer
// than them happen often.
const (
	liveness = 4 * time.Second // APOLLO_LIVENESS: a silent worker's attempt is redelivered
	leaseTTL = 3 * time.Second // APOLLO_HUB_LEASE_TTL: a dead coordinator's lease lapses
	// pauseOver is how much longer than both deadlines a pause lasts, at
	// least.
	pauseOver = liveness + leaseTTL
)

// TestNemesis runs tasks on a 3-node hub with 3 workers while a seeded
// random schedule kills, pauses and cuts off every kind of party, a
// second coordinator taking a task over whenever one dies; after each task
// it checks the invariants of Check, and prints a summary line: faults
// by kind, runs, violations.
func TestNemesis(t *testing.T) {
	dur := time.Minute
	d, err := time.ParseDuration(os.Getenv(envDuration))
	switch {
	case err == nil && d > 0:
		dur = d
	case testing.Short():
		t.Skip("-short: the nemesis injects faults over real processes for a minute (.ci/run runs it); " +
			"run without -short, or set " + envDuration + "=10s")
	}
	seed := time.Now().UnixNano()
	if s, err := strconv.ParseInt(os.Getenv(envSeed), 10, 64); err == nil {
		seed = s
	}
	t.Logf("nemesis: seed %d (replay the schedule with %s=%d), faults for %s", seed, envSeed, seed, dur)
	w := newWorld(t, seed)
	w.deleteState = os.Getenv(envDeleteState) != "0"

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	deadline := time.Now().Add(dur)
	var sched sync.WaitGroup
	sched.Add(1)
	go func() {
		defer sched.Done()
		w.schedule(ctx, deadline)
	}()
	var violations []string
	runs := 0
	for time.Now().Before(deadline) {
		vs := w.runTask(fmt.Sprintf("t%d", runs+1))
		runs++
		violations = append(violations, vs...)
	}
	stop()
	sched.Wait()
	kinds := make([]string, 0, len(w.faults))
	total := 0
	for k, n := range w.faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	summary := fmt.Sprintf("nemesis: seed %d, %s of faults: %d run(s), %d fault(s) injected (%s), %d violation(s)",
		seed, dur, runs, total, strings.Join(kinds, ", "), len(violations))
	t.Log(summary)
	fmt.Println(summary)
	for _, v := range violations {
		t.Errorf("seed %d: %s", seed, v)
	}
}

// world is the processes and proxies of one nemesis test.
type world struct {
	t    *testing.T
	root string
	bin  string
	tag  string // in every process's environment, to find orphans
	env  []string
	rng  *rand.Rand
	rmu  sync.Mutex // guards rng

	px      *proxies
	hubs    []*member
	workers []*member
	// coordURLs are each coordinator slot's hub URLs, through its links.
	coordURLs  [2]string
	coordLinks [2][]*link
	direct     string    // the hub's URLs without proxies, for the checker
	routes     [][]*link // routes[i]: hub i's links to the others

	mu          sync.Mutex
	coord       *proc // the coordinator running now, or nil
	coordSlot   int
	faults      map[string]int
	hubDown     bool // a hub node is killed or paused: at most one at a time
	active      int  // faults under way
	dropState   bool // the next coordinator starts in an empty state folder
	deleteState bool
}

// member is a hub node or a worker: a process the nemesis restarts
// after it kills it, and its links.
type member struct {
	p     *proc
	links []*link // its connections' links (a worker's to each hub node)
	down  bool    // killed or paused on purpose, not to be restarted yet
}

func (w *world) intn(n int) int {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	return w.rng.Intn(n)
}

func (w *world) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.intn(int(hi-lo)/int(time.Millisecond)+1))*time.Millisecond
}

func (w *world) count(kind string) {
	w.mu.Lock()
	w.faults[kind]++
	w.mu.Unlock()
}

// newWorld starts three hub nodes, routed to each other through links,
// and three workers, each connected to every node through its own links.
func newWorld(t *testing.T, seed int64) *world {
	bin, err := apollo.Path()
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	if os.Getenv(envKeep) != "" {
		if root, err = os.MkdirTemp("", "apollo-nemesis-"); err != nil {
			t.Fatal(err)
		}
		t.Logf("nemesis: the world is kept in %s", root)
	}
	w := &world{t: t, root: root, bin: bin, tag: "APOLLO_NEMESIS_TAG=" + root, rng: rand.New(rand.NewSource(seed)),
		px: newProxies(), faults: map[string]int{}}
	w.env = append(os.Environ(), w.tag, "NO_COLOR=1", "APOLLO_KILL_GRACE=100ms",
		"APOLLO_LIVENESS="+liveness.String(), "APOLLO_HUB_LEASE_TTL="+leaseTTL.String(),
		"APOLLO_HUB_CALL_TIMEOUT=1s", "APOLLO_HUB_GIVE_UP=30s", "APOLLO_HUB_UNTAKEN=10s")
	if testbin.Race() {
		w.env = append(w.env, testbin.RaceEnv(root))
		t.Logf("nemesis: the processes run with the race detector; a data race any of them reports is a violation")
	}
	t.Cleanup(w.close)

	ports, err := hubtest.FreePorts(6)
	if err != nil {
		t.Fatal(err)
	}
	var direct []string
	for i := range 3 {
		direct = append(direct, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	w.direct = strings.Join(direct, ",")
	w.routes = make([][]*link, 3)
	for i := range 3 {
		var routes []string
		for j := range 3 {
			if j == i {
				continue
			}
			l, err := w.px.add(hubName(i), hubName(j), fmt.Sprintf("127.0.0.1:%d", ports[3+j]))
			if err != nil {
				t.Fatal(err)
			}
			w.routes[i] = append(w.routes[i], l)
			routes = append(routes, l.addr())
		}
		p := w.newProc(hubName(i), "hub", "--store", filepath.Join(root, hubName(i)), "--name", hubName(i),
			"--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]), "--cluster", fmt.Sprintf("127.0.0.1:%d", ports[3+i]),
			"--routes", strings.Join(routes, ","))
		w.hubs = append(w.hubs, &member{p: p, links: w.routes[i]})
	}
	for _, h := range w.hubs {
		if err := h.p.start(); err != nil {
			t.Fatal(err)
		}
	}
	// Clients: each worker and coordinator slot reaches every node through
	// a link of its own.
	clientURLs := func(name string) (string, []*link) {
		var urls []string
		var links []*link
		for j := range 3 {
			l, err := w.px.add(name, hubName(j), fmt.Sprintf("127.0.0.1:%d", ports[j]))
			if err != nil {
				t.Fatal(err)
			}
			links = append(links, l)
			urls = append(urls, "nats://"+l.addr())
		}
		return strings.Join(urls, ","), links
	}
	for i := range 2 {
		w.coordURLs[i], w.coordLinks[i] = clientURLs(coordName(i))
	}
	if err := w.waitHub(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		name := fmt.Sprintf("w%d", i+1)
		urls, links := clientURLs(name)
		p := w.newProc(name, "worker", "--hub", urls, "--slots", "2", "--state-dir", filepath.Join(root, name))
		if err := p.start(); err != nil {
			t.Fatal(err)
		}
		w.workers = append(w.workers, &member{p: p, links: links})
	}
	return w
}

func hubName(i int) string   { return fmt.Sprintf("h%d", i+1) }
func coordName(i int) string { return fmt.Sprintf("c%c", 'A'+i) }

func (w *world) newProc(name string, args ...string) *proc {
	return &proc{name: name, bin: w.bin, args: args, env: w.env, dir: w.root, out: filepath.Join(w.root, name+".out")}
}

// waitHub waits until the hub has its streams (a new cluster elects its
// first leader in 4 to 9 s).
func (w *world) waitHub() error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: w.direct, Name: "nemesis", CallTimeout: time.Second, GiveUp: 90 * time.Second})
	if err != nil {
		return err
	}
	defer c.Close()
	for _, s := range []string{remote.StepsStream, remote.EventsStream, remote.OutputStream, "KV_" + remote.LeaseBucket, "KV_" + remote.IdemBucket} {
		for {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			_, err := c.JS.Stream(cctx, s)
			ccancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("the hub's stream %s is not there within 90s: %v", s, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// close ends everything the world started.
func (w *world) close() {
	w.mu.Lock()
	c := w.coord
	w.mu.Unlock()
	if c != nil {
		c.kill()
	}
	for _, m := range append(append([]*member{}, w.workers...), w.hubs...) {
		m.p.kill()
	}
	killTagged(w.tag)
	w.px.close()
	w.checkRaces()
	if os.Getenv(envKeep) == "" {
		os.RemoveAll(w.root)
	}
}

// checkRaces fails the test on each data race that a process built with the
// race detector reported (testbin.Race).
func (w *world) checkRaces() {
	reports, err := testbin.RaceReports(w.root)
	if err != nil {
		w.t.Errorf("nemesis: reading the race detector's reports: %v", err)
	}
	for _, r := range reports {
		w.t.Errorf("nemesis: a process reported a data race:\n%s", r)
	}
}

// pipelineYAML is a DAG of about 30 steps in 5 layers, each step after one
// or two of the layer before; every body appends "<step> <attempt>
// <worker>" to effects and sleeps a little.
func (w *world) pipelineYAML(effects string) (string, []string) {
	var b strings.Builder
	b.WriteString("task_name: nemesis\nmax_dirty_restarts: 100\nsteps:\n")
	var ids, prev []string
	for li, size := range []int{6, 8, 8, 6, 2} {
		var layer []string
		for k := range size {
			id := fmt.Sprintf("s%d_%d", li, k)
			fmt.Fprintf(&b, "  - id: %s\n", id)
			fmt.Fprintf(&b, "    command: 'echo \"$APOLLO_STEP_ID $APOLLO_RETRY_COUNT $APOLLO_WORKER\" >> %s; sleep 0.%d'\n", effects, 1+w.intn(4))
			b.WriteString("    cleanup_command: \"true\"\n")
			if len(prev) > 0 {
				deps := []string{prev[w.intn(len(prev))]}
				if d := prev[w.intn(len(prev))]; d != deps[0] {
					deps = append(deps, d)
				}
				fmt.Fprintf(&b, "    depends_on: [%s]\n", strings.Join(deps, ", "))
			}
			layer = append(layer, id)
		}
		ids = append(ids, layer...)
		prev = layer
	}
	return b.String(), ids
}

// runLimit bounds one task: past it the run counts as stuck.
const runLimit = 4 * time.Minute

// runTask runs one task to its end, a new coordinator taking over each
// time one exits without finishing it, and checks it.
func (w *world) runTask(task string) []string {
	dir := filepath.Join(w.root, task)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return []string{err.Error()}
	}
	effects := filepath.Join(dir, "effects")
	yaml, steps := w.pipelineYAML(effects)
	pipe := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(pipe, []byte(yaml), 0o644); err != nil {
		return []string{err.Error()}
	}
	began := time.Now()
	states := 0
	state := filepath.Join(dir, "state0")
	var logs []Log
	var notes []string
	finished := false
	for n := 0; time.Since(began) < runLimit; n++ {
		w.mu.Lock()
		if w.dropState {
			w.dropState = false
			states++
			state = filepath.Join(dir, fmt.Sprintf("state%d", states))
		}
		slot := n % 2
		w.mu.Unlock()
		p := w.newProc(fmt.Sprintf("%s.%d.%s", task, n, coordName(slot)), "run", pipe, "--hub", w.coordURLs[slot],
			"--task-id", task, "--state-dir", state, "--progress", "plain")
		p.dir = dir
		if err := p.start(); err != nil {
			return []string{err.Error()}
		}
		w.mu.Lock()
		w.coord, w.coordSlot = p, slot
		w.mu.Unlock()
		code, exited := p.waitUntil(began.Add(runLimit))
		if !exited { // a coordinator that hangs is a finding, not a test timeout
			notes = append(notes, fmt.Sprintf("coordinator %d still running at the task's limit, killed; its last line: %s", n, lastLine(p.out)))
			p.signal(syscall.SIGCONT)
			p.kill()
			code = p.wait()
		}
		w.mu.Lock()
		w.coord = nil
		w.mu.Unlock()
		if lines := readLog(state, task); lines != nil {
			logs = append(logs, Log{Name: fmt.Sprintf("coordinator %d (%s, exit %d)", n, filepath.Base(state), code), Lines: lines})
		}
		if code == 0 {
			finished = true
			break
		}
		if code != -1 && code != 3 {
			notes = append(notes, fmt.Sprintf("coordinator %d exited %d: %s", n, code, lastLine(p.out)))
		}
		time.Sleep(w.between(200*time.Millisecond, time.Second))
	}
	var out []string
	if !finished {
		out = append(out, fmt.Sprintf("task %s: stuck: not finished within %s (%v)", task, runLimit, notes))
	}
	eff, _ := os.ReadFile(effects)
	hub, err := w.hubLog(task)
	// A read of the hub may end early (a fetch that timed out while a
	// node restarts): read again while it is shorter than a coordinator's
	// local log, which the hub had to take first. A record the hub truly
	// lacks stays missing however often it is read.
	for try := 0; err == nil && hub != nil && len(hub) < longest(logs) && try < 5; try++ {
		time.Sleep(time.Second)
		hub, err = w.hubLog(task)
	}
	if err != nil {
		out = append(out, fmt.Sprintf("task %s: the hub's log: %v", task, err))
	}
	refs, err := outputRefs(pipe)
	if err != nil {
		out = append(out, fmt.Sprintf("task %s: %v", task, err))
	}
	for _, v := range Check(Run{Task: task, Steps: steps, Logs: logs, Hub: hub, Effects: ParseEffects(eff), Refs: refs}) {
		out = append(out, fmt.Sprintf("task %s: %s", task, v))
	}
	w.t.Logf("task %s: %d coordinator(s), %s, %d violation(s)", task, len(logs), time.Since(began).Round(time.Second), len(out))
	return out
}

// outputRefs are, by step id, the steps whose outputs a step of the
// pipeline at path names beyond its depends_on: dependencies the log does
// not record (Run.Refs).
func outputRefs(path string) (map[string][]string, error) {
	p, err := pipeline.Load(path, pipeline.LoadOptions{})
	if err != nil {
		return nil, fmt.Errorf("the pipeline does not load: %v", err)
	}
	refs := map[string][]string{}
	for _, s := range p.Steps {
		if len(s.OutputRefs) > 0 {
			refs[s.ID] = s.OutputRefs
		}
	}
	return refs, nil
}

// longest is the record count of the longest of logs.
func longest(logs []Log) int {
	n := 0
	for _, l := range logs {
		n = max(n, len(l.Lines))
	}
	return n
}

// lastLine is the last line a process wrote.
func lastLine(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// readLog reads the task's newest log in the state folder: its complete
// lines, nil when there is none.
func readLog(state, task string) [][]byte {
	logs, _ := filepath.Glob(filepath.Join(state, "logs", "task_"+task+"_*.jsonl"))
	if len(logs) == 0 {
		return nil
	}
	sort.Strings(logs)
	b, err := os.ReadFile(logs[len(logs)-1])
	if err != nil {
		return nil
	}
	return ParseLines(b)
}

// hubLog reads the task's log as the hub holds it: nil when the hub holds
// no task logs (no such stream), so that Check compares the coordinators'
// logs with each other instead.
func (w *world) hubLog(task string) ([][]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := remote.Connect(ctx, remote.Config{URLs: w.direct, Name: "nemesis checker", CallTimeout: 2 * time.Second, GiveUp: 50 * time.Second})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var lines [][]byte
	err = c.Do(ctx, "read the task's log", func(ctx context.Context) error {
		lines = nil
		s, err := c.JS.Stream(ctx, remote.LogStream)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		lines = [][]byte{}
		if info.State.Msgs == 0 {
			return nil
		}
		cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{remote.LogSubject(task)}})
		if err != nil {
			return err
		}
		for {
			batch, err := cons.Fetch(500, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				return err
			}
			got := 0
			last := false
			for m := range batch.Messages() {
				got++
				line := []byte(strings.TrimSuffix(string(m.Data()), "\n"))
				if r, err := eventlog.Decode(line); err == nil && r.TaskID == task {
					lines = append(lines, line)
				}
				if md, err := m.Metadata(); err == nil && md.NumPending == 0 {
					last = true
				}
			}
			if err := batch.Error(); err != nil {
				return err
			}
			if last || got == 0 {
				return nil
			}
		}
	})
	return lines, err
}

// schedule injects faults until deadline, then heals everything and
// waits for the faults under way to end.
func (w *world) schedule(ctx context.Context, deadline time.Time) {
	var wg sync.WaitGroup
	for time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(w.between(500*time.Millisecond, 2500*time.Millisecond)):
		}
		w.revive()
		w.mu.Lock()
		busy := w.active >= 2
		w.mu.Unlock()
		if busy || ctx.Err() != nil || !time.Now().Before(deadline) {
			continue
		}
		wg.Add(1)
		w.mu.Lock()
		w.active++
		w.mu.Unlock()
		go func() {
			defer wg.Done()
			defer func() {
				w.mu.Lock()
				w.active--
				w.mu.Unlock()
			}()
			w.inject()
		}()
	}
	wg.Wait()
	w.revive()
}

// revive restarts the hub nodes and workers that exited while not down
// on purpose (a worker gives up on a hub unreachable for too long).
func (w *world) revive() {
	for _, m := range append(append([]*member{}, w.hubs...), w.workers...) {
		w.mu.Lock()
		down := m.down
		w.mu.Unlock()
		if !down && !m.p.running() {
			if err := m.p.start(); err != nil {
				w.t.Logf("restart %s: %v", m.p.name, err)
			}
		}
	}
}

// inject picks one fault, injects it, and heals it when its time is up.
func (w *world) inject() {
	switch k := w.intn(100); {
	case k < 15:
		w.killCoordinator()
	case k < 30:
		w.killMember("kill-worker", w.workers[w.intn(len(w.workers))], false)
	case k < 40:
		w.killMember("kill-hub", w.hubs[w.intn(len(w.hubs))], true)
	case k < 47:
		w.pauseCoordinator()
	case k < 57:
		w.pauseMember("pause-worker", w.workers[w.intn(len(w.workers))], false)
	case k < 62:
		w.pauseMember("pause-hub", w.hubs[w.intn(len(w.hubs))], true)
	case k < 85:
		w.partition()
	case k < 93:
		w.slow()
	default:
		w.resetPeer()
	}
}

// killCoordinator kills the running coordinator with SIGKILL: another
// takes over once its lease has lapsed. With the delete-state fault, the
// next one starts in an empty state folder half the time.
func (w *world) killCoordinator() {
	w.mu.Lock()
	c := w.coord
	w.mu.Unlock()
	if c == nil || !c.signal(syscall.SIGKILL) {
		return
	}
	w.count("kill-coordinator")
	if w.deleteState && w.intn(2) == 0 {
		w.mu.Lock()
		w.dropState = true
		w.mu.Unlock()
		w.count("delete-state")
	}
}

// pauseCoordinator stops the running coordinator past its lease and the
// workers' liveness, then lets it go on.
func (w *world) pauseCoordinator() {
	w.mu.Lock()
	c := w.coord
	w.mu.Unlock()
	if c == nil || !c.signal(syscall.SIGSTOP) {
		return
	}
	w.count("pause-coordinator")
	time.Sleep(w.between(pauseOver, pauseOver+3*time.Second))
	c.signal(syscall.SIGCONT)
}

// claim marks m down on purpose; a hub node only if no other is down,
// so that a quorum always remains.
func (w *world) claim(m *member, hub bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if m.down || (hub && w.hubDown) {
		return false
	}
	m.down = true
	if hub {
		w.hubDown = true
	}
	return true
}

// release undoes claim.
func (w *world) release(m *member, hub bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	m.down = false
	if hub {
		w.hubDown = false
	}
}

// killMember kills a worker (half the time with its steps, as a machine's
// death does; else they run on, orphaned) or a hub node with SIGKILL, and
// starts it again a moment later on the same folder.
func (w *world) killMember(kind string, m *member, hub bool) {
	if !w.claim(m, hub) {
		return
	}
	defer w.release(m, hub)
	pid := m.p.pid()
	if pid == 0 {
		return
	}
	if !hub && w.intn(2) == 0 {
		m.p.signal(syscall.SIGSTOP) // no new step starts meanwhile
		for _, g := range childGroups(pid) {
			syscall.Kill(-g, syscall.SIGKILL)
		}
		kind += "+steps"
	}
	m.p.kill()
	w.count(kind)
	time.Sleep(w.between(300*time.Millisecond, 3*time.Second))
	if err := m.p.start(); err != nil {
		w.t.Logf("restart %s: %v", m.p.name, err)
	}
}

// pauseMember stops a worker or a hub node past the liveness and lease
// deadlines, then lets it go on.
func (w *world) pauseMember(kind string, m *member, hub bool) {
	if !w.claim(m, hub) {
		return
	}
	defer w.release(m, hub)
	if !m.p.signal(syscall.SIGSTOP) {
		return
	}
	w.count(kind)
	time.Sleep(w.between(pauseOver, pauseOver+3*time.Second))
	m.p.signal(syscall.SIGCONT)
}

// pickLinks picks two parties and the links between them: a client
// (worker or coordinator slot) and a hub node, or two hub nodes (both
// ways).
func (w *world) pickLinks() []*link {
	if w.intn(4) == 0 {
		i := w.intn(3)
		j := (i + 1 + w.intn(2)) % 3
		var out []*link
		for _, l := range append(append([]*link{}, w.routes[i]...), w.routes[j]...) {
			if (l.from == hubName(i) && l.to == hubName(j)) || (l.from == hubName(j) && l.to == hubName(i)) {
				out = append(out, l)
			}
		}
		return out
	}
	var clients [][]*link
	for _, m := range w.workers {
		clients = append(clients, m.links)
	}
	clients = append(clients, w.coordLinks[0], w.coordLinks[1])
	links := clients[w.intn(len(clients))]
	if w.intn(3) == 0 {
		return links // the client cut off from the whole hub
	}
	return []*link{links[w.intn(len(links))]}
}

// partition cuts the links between two parties (nothing passes either
// way, the connections stay open), then heals them, closing the
// connections that lost bytes.
func (w *world) partition() {
	links := w.pickLinks()
	var cut []*link
	for _, l := range links {
		if l.toxic("timeout", map[string]any{"timeout": 0}) {
			cut = append(cut, l)
		}
	}
	if len(cut) == 0 {
		return
	}
	w.count("partition")
	time.Sleep(w.between(time.Second, pauseOver+2*time.Second))
	for _, l := range cut {
		l.heal(true)
	}
}

// slow adds latency with jitter to the links between two parties for a
// while.
func (w *world) slow() {
	var faulted []*link
	for _, l := range w.pickLinks() {
		if l.toxic("latency", map[string]any{"latency": 50 + w.intn(400), "jitter": w.intn(200)}) {
			faulted = append(faulted, l)
		}
	}
	if len(faulted) == 0 {
		return
	}
	w.count("latency")
	time.Sleep(w.between(time.Second, 6*time.Second))
	for _, l := range faulted {
		l.heal(false)
	}
}

// resetPeer resets the connections between two parties (and the new ones,
// for a moment).
func (w *world) resetPeer() {
	var faulted []*link
	for _, l := range w.pickLinks() {
		if l.toxic("reset_peer", map[string]any{"timeout": w.intn(500)}) {
			faulted = append(faulted, l)
		}
	}
	if len(faulted) == 0 {
		return
	}
	w.count("reset-peer")
	time.Sleep(w.between(200*time.Millisecond, 2*time.Second))
	for _, l := range faulted {
		l.heal(true)
	}
}
