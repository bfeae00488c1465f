package engine

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"apollo/engine/hubtest"
	"apollo/engine/remote"
	"apollo/engine/worker"
	"apollo/eventlog"
)

// TestHubFigures measures what docs/performance.md reports of scale-out,
// on hubs of 1 and 3 embedded nodes in this process: a chain of 50 `true`
// steps run locally, remotely with the task's log in the hub and remotely
// without it, and one replicated write (an append to a task's log in the
// hub), in rounds whose order rotates; the parts of a remote chain step,
// each with the replicated writes it waits for (phaseClock); the writes
// each remote step makes, counted from the hub's streams and, through
// three nodes, its raft groups; a wide DAG of 1,000 `true` steps with and
// without the log in the hub, in rounds too, with the raft entries of
// those with it; and the time from a
// worker's death to its attempt running elsewhere. It prints medians and
// asserts nothing of time:
//
//	APOLLO_HUB_FIGURES=1 go test ./engine -run TestHubFigures -v
//
// APOLLO_HUB_FIGURES=chain measures the chain rows only, =all adds the
// wide DAG on 1, 2 and 4 workers and a worker's death; APOLLO_HUB_ROUNDS
// sets the rounds (default 5); APOLLO_HUB_NODES=1 or 3 one hub only.
func TestHubFigures(t *testing.T) {
	if os.Getenv("APOLLO_HUB_FIGURES") == "" {
		t.Skip("set APOLLO_HUB_FIGURES=1 to measure (minutes)")
	}
	rounds := 5
	if n, err := strconv.Atoi(os.Getenv("APOLLO_HUB_ROUNDS")); err == nil && n > 0 {
		rounds = n
	}
	write := func(e *hubEnv, name, shape string, n int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "task_name: %s\nsteps:\n", name)
		for i := range n {
			fmt.Fprintf(&b, "  - id: s%d\n    command: \"true\"\n", i)
			if i > 0 && shape == "chain" {
				fmt.Fprintf(&b, "    depends_on: [s%d]\n", i-1)
			}
		}
		path := filepath.Join(e.dir, name+".yaml")
		os.WriteFile(path, []byte(b.String()), 0o644)
		return path
	}
	nodeCounts := []int{1, 3}
	if n, err := strconv.Atoi(os.Getenv("APOLLO_HUB_NODES")); err == nil {
		nodeCounts = []int{n}
	}
	for _, nodes := range nodeCounts {
		cl := hubtest.Start(t, nodes)
		const steps = 50
		e := &hubEnv{t: t, cl: cl, dir: t.TempDir(), task: fmt.Sprintf("chain%d", nodes)}
		path := write(e, "chain", "chain", steps)
		phases := newPhaseClock()
		e.startWorker("c1", cl.URLs(), phases.hook)
		c := e.client(cl.URLs())
		// Writes per remote step, counted from the hub: the messages each
		// stream stored and the acknowledgements of the pool's consumer
		// during one remote chain (the lease and the task index are per
		// run, not per step).
		before := hubWrites(t, c, cl)
		e.task = fmt.Sprintf("count%d", nodes)
		if err := e.run(t.Context(), path, cl.URLs(), nil); err != nil {
			t.Fatal(err)
		}
		after := hubWrites(t, c, cl)
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(after)) {
			if d := after[k] - before[k]; d > 0 {
				parts = append(parts, fmt.Sprintf("%s %.2f", k, float64(d)/steps))
			}
		}
		fsyncs := int64(-1)
		for _, r := range e.logOf(e.task) {
			if r.Summary != nil && r.Summary.Fsync != nil {
				fsyncs = r.Summary.Fsync.Count
			}
		}
		t.Logf("FIGURE hub=%d writes per remote step: %s; local fsyncs of the coordinator's log %.2f a step", nodes,
			strings.Join(parts, ", "), float64(fsyncs)/steps)
		// Per-step cost: local, remote with the log in the hub, remote
		// without it, and one replicated write, in rounds whose order
		// rotates, on a noisy machine.
		kinds := []string{"local", "hublog", "nolog", "write"}
		got := map[string][]float64{}
		ratio := map[string][]float64{}
		for round := range rounds {
			per := map[string]float64{}
			for i := range kinds {
				kind := kinds[(i+round)%len(kinds)]
				e.task = fmt.Sprintf("chain%d_%d_%s", nodes, round, kind)
				began := time.Now()
				var err error
				switch kind {
				case "local":
					err = New(Options{StateDir: filepath.Join(e.dir, ".local"), Workdir: e.dir, Stdout: io.Discard, Stderr: io.Discard,
						Progress: ProgressQuiet}).Run(t.Context(), path, RunOptions{TaskID: e.task})
				case "hublog", "nolog":
					err = e.run(t.Context(), path, cl.URLs(), func(ro *RunOptions) { ro.Hub.noLog = kind == "nolog" })
					if err == nil && kind == "hublog" {
						phases.collect(e.task, e.logOf(e.task))
					}
				case "write":
					per[kind] = replicatedWrite(t, c, e.task, steps)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				per[kind] = float64(time.Since(began).Microseconds()) / steps
			}
			for k, v := range per {
				got[k] = append(got[k], v)
			}
			ratio["hublog"] = append(ratio["hublog"], per["hublog"]/per["local"])
			ratio["nolog"] = append(ratio["nolog"], per["nolog"]/per["local"])
			// The floor of a remote step in a chain: the local step, plus
			// the replicated writes it must wait for one after another
			// (serialWrites).
			floor := per["local"] + float64(serialWrites)*per["write"]
			ratio["floor"] = append(ratio["floor"], per["hublog"]/floor)
			t.Logf("round %d hub=%d: local %.0f µs/step, log in hub %.0f, without %.0f, one replicated write %.0f µs",
				round, nodes, per["local"], per["hublog"], per["nolog"], per["write"])
		}
		t.Logf("FIGURE hub=%d chain of %d true steps, medians of %d rounds: local %.0f µs/step; remote, log in the hub %.0f µs/step (%.2fx local); "+
			"remote, log not in the hub %.0f µs/step (%.2fx local); one replicated write %.0f µs",
			nodes, steps, rounds, median(got["local"]), median(got["hublog"]), median(ratio["hublog"]),
			median(got["nolog"]), median(ratio["nolog"]), median(got["write"]))
		t.Logf("FIGURE hub=%d floor of a remote chain step (local + %d replicated writes): remote with the log in the hub is %.2fx it (median of %d rounds)",
			nodes, serialWrites, median(ratio["floor"]), rounds)
		// Where a remote step's time goes, from the coordinator's DISPATCH
		// records and the worker's hooks (one clock: one process): the
		// replicated writes each part waits for, and what is left.
		w := median(got["write"])
		for _, ph := range phaseParts() {
			d := median(phases.parts[ph.name])
			t.Logf("FIGURE hub=%d remote chain step, %s: %.0f µs (median of %d steps), %d replicated writes (%.0f µs), the rest %.0f µs",
				nodes, ph.name, d, len(phases.parts[ph.name]), ph.writes, float64(ph.writes)*w, d-float64(ph.writes)*w)
		}
		if os.Getenv("APOLLO_HUB_FIGURES") == "chain" {
			continue
		}
		// A wide DAG of 1,000 steps on 2 workers × 8 slots, with and
		// without the log in the hub, in turn.
		we := &hubEnv{t: t, cl: cl, dir: t.TempDir()}
		wpath := write(we, "wide", "wide", 1000)
		for i := range 2 {
			we.startWorker(fmt.Sprintf("x%d", i), cl.URLs(), func(o *worker.Options) { o.Slots = 8 })
		}
		wide := map[bool][]float64{}
		// The replicated writes of the runs with the log in the hub, from
		// each raft group's commits: a wide DAG's records, events and
		// deliveries share raft entries.
		wideWrites := map[string]int64{}
		for round := range rounds {
			for _, noLog := range []bool{round%2 == 0, round%2 != 0} {
				we.task = fmt.Sprintf("wide%d_%d_%v", nodes, round, noLog)
				var before map[string]int64
				if !noLog {
					before = hubWrites(t, c, cl)
				}
				began := time.Now()
				if err := we.run(t.Context(), wpath, cl.URLs(), func(ro *RunOptions) { ro.Hub.noLog = noLog }); err != nil {
					t.Fatal(err)
				}
				rate := 1000 / time.Since(began).Seconds()
				if !noLog {
					for k, v := range hubWrites(t, c, cl) {
						wideWrites[k] += v - before[k]
					}
				}
				wide[noLog] = append(wide[noLog], rate)
				t.Logf("round %d hub=%d wide 1000 true steps, 2 workers x 8 slots, log in the hub %v: %.0f steps/s", round, nodes, !noLog, rate)
			}
		}
		t.Logf("FIGURE hub=%d wide 1000 true steps, 2 workers x 8 slots, medians of %d rounds: log in the hub %.0f steps/s, without %.0f steps/s",
			nodes, rounds, median(wide[false]), median(wide[true]))
		var groups []string
		for _, k := range slices.Sorted(maps.Keys(wideWrites)) {
			if d := wideWrites[k]; d > 0 && strings.HasPrefix(k, "raft ") {
				groups = append(groups, fmt.Sprintf("%s %.2f", strings.TrimPrefix(k, "raft "), float64(d)/float64(1000*rounds)))
			}
		}
		if len(groups) > 0 {
			t.Logf("FIGURE hub=%d wide 1000 true steps, log in the hub, replicated writes (raft entries) per step: %s", nodes, strings.Join(groups, ", "))
		}
		if os.Getenv("APOLLO_HUB_FIGURES") != "all" {
			continue
		}
		// How it scales with workers: 1, 2 and 4 of 8 slots, one run each.
		for _, workers := range []int{1, 2, 4} {
			se := &hubEnv{t: t, cl: cl, dir: t.TempDir(), task: fmt.Sprintf("scale%d_%d", nodes, workers)}
			spath := write(se, "wide", "wide", 1000)
			for i := range workers {
				se.startWorker(fmt.Sprintf("y%d", i), cl.URLs(), func(o *worker.Options) { o.Slots = 8 })
			}
			began := time.Now()
			if err := se.run(t.Context(), spath, cl.URLs(), nil); err != nil {
				t.Fatal(err)
			}
			took := time.Since(began)
			t.Logf("FIGURE hub=%d workers=%d slots=8 wide 1000 true steps: %s, %.0f steps/s", nodes, workers, took.Round(time.Millisecond), 1000/took.Seconds())
		}
	}
	if os.Getenv("APOLLO_HUB_FIGURES") != "all" {
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

// serialWrites is how many replicated writes a remote step of a chain
// waits for one after another, through a hub of one node or three. Through one node:
// the previous step's STEP_END and this one's DISPATCH (two publishes:
// remote.Log.AppendBatch appends one by one there), the work message, the
// start and the end. Through three: the STEP_END with the DISPATCH (and
// the step before's STEP_START, taken along: hubLinger) in one atomic
// batch, the message, the pool consumer's record of its delivery (a
// replicated consumer stores it on a quorum before it sends the message:
// nats-server's replicateDeliveries), the start and the end. The
// acknowledgement and what it removes from the work queue are written
// while the next DISPATCH is.
const serialWrites = 5

// replicatedWrite is the median time of one append of a 350-byte record
// to a task's log in the hub (replicated and fsynced on the hub's nodes
// before it is acknowledged), over n appends one after another: the unit
// of a remote step's floor.
func replicatedWrite(t *testing.T, c *remote.Client, task string, n int) float64 {
	t.Helper()
	l, err := c.OpenLog(t.Context(), task)
	if err != nil {
		t.Fatal(err)
	}
	line := []byte(strings.Repeat("x", 349) + "\n")
	var times []float64
	for seq := int64(1); seq <= int64(n); seq++ {
		began := time.Now()
		if err := l.Append(t.Context(), seq, line); err != nil {
			t.Fatal(err)
		}
		times = append(times, float64(time.Since(began).Microseconds()))
	}
	return median(times)
}

// hubCounts is, per stream of the hub, the sequence of its last message,
// and per consumer of the work queue the acknowledgements it took.
func hubCounts(t *testing.T, c *remote.Client) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for info := range c.JS.ListStreams(t.Context()).Info() {
		out[info.Config.Name] = int64(info.State.LastSeq)
	}
	s, err := c.JS.Stream(t.Context(), remote.StepsStream)
	if err != nil {
		t.Fatal(err)
	}
	for info := range s.ListConsumers(t.Context()).Info() {
		out["ack "+info.Name] = int64(info.AckFloor.Consumer)
	}
	return out
}

// hubWrites is hubCounts with, through more than one node, each raft
// group's commits (raftCommits).
func hubWrites(t *testing.T, c *remote.Client, cl *hubtest.Cluster) map[string]int64 {
	t.Helper()
	out := hubCounts(t, c)
	maps.Copy(out, raftCommits(t, cl))
	return out
}

// raftCommits counts, through a hub of more than one node, the entries
// each replicated stream and consumer has committed (its raft group's
// commit index, the highest any node knows): each is one replicated write,
// stored on a quorum before it is applied. A hub of one node replicates
// nothing: it returns nothing.
func raftCommits(t *testing.T, cl *hubtest.Cluster) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	if len(cl.Nodes) < 2 {
		return out
	}
	for _, nd := range cl.Nodes {
		if nd.Hub == nil {
			continue
		}
		s := nd.Hub.Server()
		js, err := s.Jsz(&server.JSzOptions{Accounts: true, Streams: true, Consumer: true, RaftGroups: true})
		if err != nil {
			t.Fatal(err)
		}
		names := map[string]string{}
		for _, acc := range js.AccountDetails {
			for _, st := range acc.Streams {
				names[st.RaftGroup] = "raft " + st.Name
				for _, cg := range st.ConsumerRaftGroups {
					names[cg.RaftGroup] = "raft " + st.Name + "/" + cg.Name
				}
			}
		}
		for _, groups := range *s.Raftz(&server.RaftzOptions{AccountFilter: globalAccount}) {
			for id, g := range groups {
				if name, ok := names[id]; ok {
					out[name] = max(out[name], int64(g.Committed))
				}
			}
		}
	}
	return out
}

// globalAccount is the account a hub without accounts keeps its streams in.
const globalAccount = "$G"

// median is the middle of xs (the mean of the middle two).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
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

// phaseClock times the parts of a remote chain step: the worker's hooks
// say when each attempt's start and end were stored, the coordinator's
// DISPATCH records when it decided each step's attempt.
type phaseClock struct {
	mu           sync.Mutex
	started, end map[string]time.Time // by task/step
	parts        map[string][]float64 // µs, by phase name
}

func newPhaseClock() *phaseClock {
	return &phaseClock{started: map[string]time.Time{}, end: map[string]time.Time{}, parts: map[string][]float64{}}
}

// hook sets a worker's Started and AfterEnd to note the times.
func (p *phaseClock) hook(o *worker.Options) {
	o.Started = func(w *remote.Work, _ int) { p.note(p.started, w) }
	o.AfterEnd = func(w *remote.Work) { p.note(p.end, w) }
}

func (p *phaseClock) note(m map[string]time.Time, w *remote.Work) {
	now := time.Now()
	p.mu.Lock()
	m[w.Task+"/"+w.Step] = now
	p.mu.Unlock()
}

// The parts of a remote chain step, in order.
const (
	phaseToStart = "DISPATCH to its start stored"
	phaseBody    = "start stored to end stored"
	phaseToNext  = "end stored to the next DISPATCH"
)

// phasePart is a part of a remote chain step and the replicated writes
// it waits for.
type phasePart struct {
	name   string
	writes int
}

// phaseParts are the parts of a remote chain step, in order: to its start
// stored, the end of the step before and the DISPATCH (two publications
// through one node; one atomic batch through three, where the consumer's
// record of the delivery is one more), the attempt's message and its
// start; to its end stored, the end; to the next DISPATCH, nothing.
func phaseParts() []phasePart {
	return []phasePart{{phaseToStart, serialWrites - 1}, {phaseBody, 1}, {phaseToNext, 0}}
}

// collect adds the parts of each step of task's chain, from its log.
func (p *phaseClock) collect(task string, recs []*eventlog.Record) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var dispatched []*eventlog.Record
	for _, r := range recs {
		if r.EventType == eventlog.Dispatch {
			dispatched = append(dispatched, r)
		}
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) }
	for i, r := range dispatched {
		key := task + "/" + r.StepID
		started, end := p.started[key], p.end[key]
		if started.IsZero() || end.IsZero() {
			continue
		}
		p.parts[phaseToStart] = append(p.parts[phaseToStart], us(started.Sub(r.Time())))
		p.parts[phaseBody] = append(p.parts[phaseBody], us(end.Sub(started)))
		if i+1 < len(dispatched) {
			p.parts[phaseToNext] = append(p.parts[phaseToNext], us(dispatched[i+1].Time().Sub(end)))
		}
	}
}
