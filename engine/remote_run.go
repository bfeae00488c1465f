package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/engine/remote"
	"apollo/engine/textfmt"
	"apollo/engine/usage"
	"apollo/eventlog"
)

// HubOptions are the settings of apollo run --hub (docs/spec.md §8): where
// the hub is, and how patient to be with it.
type HubOptions struct {
	// URLs lists the hub's nodes, comma-separated; "" runs locally.
	URLs string
	// Pool is the pool of steps that name none (default "default").
	Pool string
	Auth remote.Auth
	// detach (tests): an interrupted run leaves its remote attempts
	// running and stops at once, as a killed coordinator does.
	detach bool
	// afterPlan (tests) runs once the nodes are planned, before the
	// attempts in flight are listed.
	afterPlan func()
	// noLog (figures): the task's log is not kept in the hub, as before
	// it was, to measure what keeping it costs.
	noLog bool
	// linger (tests): how long a record waits to ride with the next
	// append when the task's log in the hub is replicated, replicatedLinger
	// when zero (hubLinger).
	linger time.Duration
	// CallTimeout bounds each call to the hub (default 5 s); GiveUp is how
	// long the hub may stay unreachable before the run stops with an error
	// (default 2 minutes); LeaseTTL is how long another coordinator waits
	// for this one's lease to lapse when this one dies (default 30 s).
	CallTimeout, GiveUp, LeaseTTL time.Duration
	// Untaken is how long a dispatched attempt may wait for a worker before
	// the run says so (default 1 minute), and again each time as long.
	Untaken time.Duration
}

// DefaultUntaken is how long a dispatched attempt waits for a worker
// before the run says that none has taken it.
const DefaultUntaken = time.Minute

// DefaultLeaseTTL is how long a coordinator's lease lasts without renewal.
const DefaultLeaseTTL = 30 * time.Second

// HubError says the run stopped because of the hub: unreachable past the
// limit, or the lease taken over. The log is left resumable.
type HubError struct {
	TaskID string
	Err    error
}

func (e *HubError) Error() string {
	_, fenced := errors.AsType[*remote.FencedError](e.Err)
	_, lost := errors.AsType[*remote.LostError](e.Err)
	if fenced || lost {
		return fmt.Sprintf("task %s stopped: %v", e.TaskID, e.Err)
	}
	_, refused := errors.AsType[*remote.CredentialsError](e.Err)
	_, forbidden := errors.AsType[*remote.PermissionError](e.Err)
	if refused || forbidden {
		return fmt.Sprintf("task %s stopped: %v; run the same command again with them to resume", e.TaskID, e.Err)
	}
	return fmt.Sprintf("task %s stopped: %v; run the same command again to resume once the hub is back: "+
		"attempts in flight are adopted, not run again", e.TaskID, e.Err)
}

func (e *HubError) Unwrap() error { return e.Err }

// hubParallelism is a hub run's default parallelism: the workers' slots
// bound what runs; the coordinator only waits.
func hubParallelism(steps int) int { return max(1, min(steps, 10000)) }

// hubRun is the coordinator's side of a run with a hub: its connection and
// lease, and the ingestion of the task's events into the log. The ingest
// goroutine is the only one that appends records derived from the hub's
// events, in stream order, so that src_seq increases strictly; node
// goroutines append DISPATCH and CLEANUP, and take an attempt's outcome
// from its slot.
type hubRun struct {
	r     *taskRun
	c     *remote.Client
	lease *remote.Lease
	// log is the task's log in the hub, to which every record goes before
	// the local file (remote_log.go); logCtx is its appends' context.
	log    *remote.Log
	logCtx context.Context
	// stopLog ends logCtx when the run fails: a coordinator that lost its
	// lease writes no more, and an append waiting for a hub without a
	// majority stops waiting.
	stopLog context.CancelCauseFunc
	pool    string
	host    string
	run     string // the task run's id in messages: its log's run_nonce
	// key is the run's key, of which each attempt's secret is a digest
	// (remote.AttemptSecret): kept in the state folder, never logged.
	key []byte
	// refused counts the reports taken for nobody's (no secret, another
	// pool): after maxRefusals, they are no longer written to the log.
	refused int

	mu      sync.Mutex
	slots   map[string]*slot // by step: its latest attempt
	adopted map[string]*slot // attempts in flight when the run started, for their nodes to wait for

	failed    chan struct{} // closed when the hub failed the run
	failErr   error
	failOnce  sync.Once
	cancelled sync.Once
	// renewedAt is when the last write of the lease that the hub stored
	// was sent (under mu): the lease is this coordinator's for its TTL
	// from then, by the hub's clock.
	renewedAt time.Time

	stopIngest context.CancelFunc
	ingestDone chan struct{}
	// ingesting is held while an event is taken in, and while the run
	// plans its nodes from the state and lists the attempts in flight
	// (holdIngest): an end taken in between the two would leave a node
	// planned to run again whose attempt is no longer in flight to adopt.
	ingesting sync.Mutex
	// ingested is the hub sequence of the last event taken in.
	ingested  atomic.Uint64
	stopOther context.CancelFunc
	otherDone sync.WaitGroup

	out *outputWriter
}

// slot is a step's latest remote attempt as the hub's events tell it.
type slot struct {
	n       int
	open    bool // dispatched and not ended (no STEP_END or LOST yet)
	started bool
	input   string // its input digest
	pool    string
	since   time.Time // when it was dispatched, or adopted
	// saidUntaken: the log has the WARNING that no worker took it.
	saidUntaken bool
	node        *node
	ctx         context.Context // the scheduler's, for the retry decision
	done        chan outcome    // one outcome per attempt
}

// outcome is how a remote attempt ended, for its node.
type outcome struct {
	lost   bool
	status string // SUCCESS, FAILED, or RUNNING when a retry is due
	delay  time.Duration
	err    error
	res    executor.Result
	worker string // the worker that ran it, for its span
}

// connectHub connects to the hub and takes the task's lease, before the
// log is opened: a second coordinator of the task writes nothing.
func (r *taskRun) connectHub(ctx context.Context) error {
	ho := r.ro.Hub
	if ho.URLs == "" {
		return nil
	}
	if len(r.t.p.Secrets) > 0 {
		// A step's message would carry them, and the hub stores its
		// messages on disk: secrets are never written.
		return usage.Errorf("%s declares secrets, which are not sent to workers (the hub stores what it carries); run it without --hub", r.t.p.Path)
	}
	host, _ := os.Hostname()
	h := &hubRun{r: r, pool: ho.Pool, host: host, slots: map[string]*slot{},
		adopted: map[string]*slot{}, failed: make(chan struct{})}
	if h.pool == "" {
		h.pool = remote.DefaultPool
	}
	c, err := remote.Connect(ctx, remote.Config{URLs: ho.URLs, Name: fmt.Sprintf("apollo run %s (pid %d)", r.t.id, os.Getpid()),
		Auth: ho.Auth, CallTimeout: ho.CallTimeout, GiveUp: ho.GiveUp, Waiting: hubWaiting(r.e.opts.Stderr, "apollo")})
	if err != nil {
		return &HubError{TaskID: r.t.id, Err: err}
	}
	h.c = c
	r.hub = h
	if err := c.Ensure(ctx, c.ClusterSize(), false); err != nil {
		return &HubError{TaskID: r.t.id, Err: err}
	}
	stateDir, _ := filepath.Abs(r.t.dir.Root)
	ttl := ho.LeaseTTL
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	sent := time.Now()
	h.lease, err = c.AcquireLease(ctx, r.t.id, remote.Holder{Host: host, PID: os.Getpid(), StateDir: stateDir,
		Since: time.Now().UTC()}, ttl)
	var held *remote.HeldError
	if errors.As(err, &held) {
		return held // exit 3, as for the task lock
	}
	if err != nil {
		return &HubError{TaskID: r.t.id, Err: err}
	}
	h.noteRenewed(sent)
	if ho.noLog {
		return nil
	}
	if h.log, err = c.OpenLog(ctx, r.t.id); err != nil {
		return &HubError{TaskID: r.t.id, Err: err}
	}
	h.log.Epoch = h.lease.Epoch()
	h.logCtx, h.stopLog = context.WithCancelCause(context.WithoutCancel(ctx))
	return nil
}

// startHub ingests the events the log does not have yet (a coordinator
// that was stopped while attempts ran), and starts the ingestion of what
// comes. Called before the nodes are built, so that the plan sees what
// happened meanwhile.
func (r *taskRun) startHub(ctx context.Context) error {
	h := r.hub
	if h == nil {
		return nil
	}
	c := h.c
	run, err := logRunID(r.logPath)
	if err != nil {
		return err
	}
	h.run = run
	keyPath, created, err := r.runKey(run)
	if err != nil {
		return err
	}
	if h.log != nil {
		h.log.Run = run
	}
	var unchecked []string
	for id, st := range r.state.Steps {
		if !st.Remote || !st.Dirty || st.CutOff {
			continue // a cut-off attempt is cleaned up and run again, not waited for
		}
		if created {
			// Dispatched under a key that is gone: their reports cannot be
			// told from forgeries, so they are cut off (cleanup, rerun).
			unchecked = append(unchecked, id)
			continue
		}
		h.slots[id] = &slot{n: st.RetryCount, open: true, started: st.StartedAt != "", input: st.InputDigest,
			done: make(chan outcome, 1)}
	}
	if len(unchecked) > 0 {
		sort.Strings(unchecked)
		fmt.Fprintf(r.e.opts.Stderr, "apollo: the run's hub key %s was missing, so the reports of the attempts in flight %v cannot be checked: "+
			"they are recorded LOST (cleanup, then the next attempt), and their workers' reports are refused\n", keyPath, unchecked)
		for _, id := range unchecked {
			// Durable before anything else: a coordinator that resumes
			// after this one must not wait for them either.
			why := fmt.Sprintf("it was dispatched under the run's hub key, which was missing (%s), so its worker's reports cannot be told from forgeries", keyPath)
			if err := r.w.AppendDurable(lostRecord(id, r.state.Steps[id].RetryCount, why)); err != nil {
				return err
			}
		}
		// Their messages and running bodies are no one's now: a worker
		// that took one later would run a superseded attempt.
		req := &remote.Cancel{}
		for _, id := range unchecked {
			req.Attempts = append(req.Attempts, remote.CancelAttempt{Step: id, Attempt: r.state.Steps[id].RetryCount})
		}
		h.askCancel(req)
		if !r.created {
			if err := h.dropEarlierRuns(ctx); err != nil {
				return &HubError{TaskID: r.t.id, Err: err}
			}
		}
	}
	if r.created {
		if err := h.dropEarlierRuns(ctx); err != nil {
			return &HubError{TaskID: r.t.id, Err: err}
		}
	}
	// Markers: the log is the authority; the bucket follows it.
	if err := h.syncMarkers(ctx); err != nil {
		return &HubError{TaskID: r.t.id, Err: err}
	}
	octx, ostop := context.WithCancel(context.WithoutCancel(ctx))
	h.stopOther = ostop
	h.out = newOutputWriter(r)
	h.otherDone.Add(2)
	go func() { defer h.otherDone.Done(); h.renew(octx) }()
	go func() { defer h.otherDone.Done(); h.out.run(octx, c, h) }()
	// Catch up: what workers reported while no coordinator listened.
	h.ingested.Store(uint64(r.state.LastSrcSeq)) // the log has taken in the events before
	feed, err := c.NewEventFeed(ctx, r.t.id, h.pools(), uint64(r.state.LastSrcSeq)+1)
	if err != nil {
		return &HubError{TaskID: r.t.id, Err: err}
	}
	caught := 0
	for {
		m, err := feed.TryNext(ctx)
		if err != nil {
			feed.Close()
			return &HubError{TaskID: r.t.id, Err: err}
		}
		if m == nil {
			break
		}
		if err := h.ingest(m.Data, int64(m.Sequence), m.Subject); err != nil {
			feed.Close()
			return err
		}
		h.ingested.Store(m.Sequence)
		caught++
	}
	if caught > 0 {
		// What the catch-up appended without waiting (starts, ends) is in
		// the log, and so in the state the run plans from, before it plans.
		if err := r.w.Sync(); err != nil {
			feed.Close()
			return err
		}
	}
	ictx, istop := context.WithCancel(context.WithoutCancel(ctx))
	h.stopIngest, h.ingestDone = istop, make(chan struct{})
	go func() {
		defer close(h.ingestDone)
		defer feed.Close()
		for {
			m, err := feed.Next(ictx)
			if err != nil {
				if ictx.Err() == nil {
					h.fail(err)
				}
				return
			}
			h.ingesting.Lock()
			err = h.ingest(m.Data, int64(m.Sequence), m.Subject)
			if err == nil {
				h.ingested.Store(m.Sequence)
			}
			h.ingesting.Unlock()
			if err != nil {
				h.fail(err)
				return
			}
		}
	}()
	if caught > 0 {
		fmt.Fprintf(r.e.opts.Stderr, "apollo: took in %d event(s) the hub kept while no coordinator ran\n", caught)
	}
	r.indexTask(eventlog.Running)
	return nil
}

// holdIngest stops events being taken in until release is called: the
// nodes are planned from the state and the attempts in flight listed
// (inFlight) from one moment of the log. Without a hub it holds nothing.
func (r *taskRun) holdIngest() (release func()) {
	h := r.hub
	if h == nil {
		return func() {}
	}
	h.ingesting.Lock()
	return h.ingesting.Unlock
}

// inFlight lists the steps whose remote attempt is still open.
func (r *taskRun) inFlight() []string {
	h := r.hub
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var open []string
	for id, sl := range h.slots {
		if sl.open {
			open = append(open, id)
		}
	}
	return open
}

// adoptInFlight lets the nodes of attempts still in flight (open, listed
// by inFlight from the state the nodes were planned from) wait for them
// instead of running them again: each is in the work queue (or held by a
// worker), or is published now when the coordinator stopped between its
// DISPATCH and its publication. An attempt that ended since it was listed
// is adopted still: its node takes the end the slot holds.
func (r *taskRun) adoptInFlight(ctx context.Context, open []string) error {
	h := r.hub
	if h == nil {
		return nil
	}
	var names []string
	for _, id := range open {
		n := r.node(id)
		if n == nil {
			continue
		}
		h.mu.Lock()
		sl := h.slots[id]
		h.mu.Unlock()
		pool := h.poolOf(n)
		qrun, q, ok, err := h.c.Queued(ctx, pool, r.t.id, id)
		if err != nil {
			return &HubError{TaskID: r.t.id, Err: err}
		}
		if !ok || qrun != h.run || q != sl.n {
			if err := h.settleUnqueued(ctx, n, sl, pool); err != nil {
				return err
			}
		}
		h.mu.Lock()
		sl.node, sl.pool, sl.since = n, pool, time.Now()
		h.adopted[id] = sl
		h.mu.Unlock()
		n.dirty, n.unclean = false, false
		n.plan.Action, n.plan.Reason = ActionRerun, "in flight on a worker: adopted"
		names = append(names, fmt.Sprintf("%s (attempt %d)", id, sl.n))
	}
	if len(names) > 0 {
		fmt.Fprintf(r.e.opts.Stderr, "apollo: adopting %d attempt(s) in flight: %v\n", len(names), names)
	}
	return nil
}

// settleUnqueued settles an adopted attempt whose message the hub's work
// queue does not hold. A worker takes a message off the queue only once
// its end or loss is stored, and reports a start before a body runs, so
// the task's events are read first, up to the pool's last: then an
// attempt still open either never reached the hub (its coordinator
// stopped between its DISPATCH and the publication), and is published
// now, or its message was dropped (a new log of the task, gc, a hand), and
// it is recorded LOST. It is never published again once it may have run:
// the hub's duplicate window does not survive a node that restarts, so a
// second publication could run the attempt's body a second time.
func (h *hubRun) settleUnqueued(ctx context.Context, n *node, sl *slot, pool string) error {
	r := h.r
	if err := h.readEventsToLast(ctx, pool); err != nil {
		return err
	}
	h.mu.Lock()
	open, started := sl.open, sl.started
	h.mu.Unlock()
	if !open {
		return nil // its end or loss came
	}
	why := "its message is gone from the hub's work queue after the worker reported its start, with no end or loss reported"
	if !started {
		rs, err := r.late(n)
		if err != nil {
			return fmt.Errorf("step %s: publish attempt %d: %w", n.id(), sl.n, err)
		}
		dup, err := h.c.Dispatch(ctx, r.workFor(n, rs, sl.n, sl.input, pool))
		if err != nil {
			return &HubError{TaskID: r.t.id, Err: err}
		}
		if !dup {
			return nil // published now: it never was, or no body of it ran
		}
		why = "the hub had its message and no longer has it, and no worker reported its start, end or loss"
	}
	rec := lostRecord(n.id(), sl.n, why)
	if err := r.w.AppendDurable(rec); err != nil {
		return err
	}
	h.close(sl, outcome{lost: true, err: errors.New(rec.ErrorMessage)})
	return nil
}

// readEventsToLast waits until the events pool's workers reported for the
// task until now are taken in.
func (h *hubRun) readEventsToLast(ctx context.Context, pool string) error {
	r := h.r
	last, err := h.c.LastEvent(ctx, pool, r.t.id)
	if err != nil {
		return &HubError{TaskID: r.t.id, Err: err}
	}
	limit := 4 * h.c.Config().CallTimeout
	wait := time.NewTimer(limit)
	defer wait.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for h.ingested.Load() < last {
		select {
		case <-h.failed:
			return h.failErr
		case <-ctx.Done():
			return ctx.Err()
		case <-wait.C:
			return &HubError{TaskID: r.t.id, Err: fmt.Errorf("the task's events up to %d were not taken in within %s", last, limit)}
		case <-tick.C:
		}
	}
	return nil
}

// logRunID is a task run's id on the hub: the run_nonce of its log's first
// TASK_START, which names the log (a new log of the same task id has
// another), and stays while the log is resumed.
func logRunID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read the log's run id: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReader(io.LimitReader(f, eventlog.MaxLineBytes)).ReadBytes('\n')
	if err != nil {
		return "", fmt.Errorf("read the log's run id from %s: %w", path, err)
	}
	rec, err := eventlog.Decode(bytes.TrimSuffix(line, []byte("\n")))
	if err != nil || rec.Start == nil || rec.Start.RunNonce == "" {
		return "", fmt.Errorf("read the log's run id: %s does not begin with a TASK_START that has a run_nonce (%v)", path, err)
	}
	return rec.Start.RunNonce, nil
}

// runKey sets the run's key, from which each attempt's secret is derived,
// and returns its file and whether it had to be made. It is kept in the
// state folder (hub/<task_id>/<run>.key, readable by its owner only), so
// that a coordinator restarted on the same log checks the reports of the
// attempts it adopts. The keys of the task's earlier runs are removed:
// their logs are no longer resumed.
func (r *taskRun) runKey(run string) (path string, created bool, err error) {
	h := r.hub
	dir := r.t.dir.HubKeys(r.t.id)
	path = r.t.dir.HubKey(r.t.id, run)
	if b, err := os.ReadFile(path); err == nil {
		if key, err := hex.DecodeString(strings.TrimSpace(string(b))); err == nil && len(key) >= 32 {
			h.key = key
			return path, false, nil
		}
	}
	if err := eventlog.MkdirAll(r.e.fs(), dir); err != nil {
		return "", false, fmt.Errorf("hub key folder: %w", err)
	}
	old, _ := filepath.Glob(filepath.Join(dir, "*.key"))
	for _, f := range old {
		if f != path {
			os.Remove(f)
		}
	}
	key := make([]byte, 32)
	rand.Read(key)
	err = eventlog.WriteFileAtomic(r.e.fs(), path, 0o600, func(w io.Writer) error {
		_, err := io.WriteString(w, hex.EncodeToString(key)+"\n")
		return err
	})
	if err != nil {
		return "", false, fmt.Errorf("hub key: %w", err)
	}
	h.key = key
	return path, true, nil
}

// dropEarlierRuns removes from the work queue the task's attempts that
// earlier runs dispatched and no worker finished: a new log of the task
// (--fresh, after gc, a replaced state folder) means no coordinator follows
// them any more (this one holds the task's lease), and a worker that took
// one later would run a step of an abandoned run.
func (h *hubRun) dropEarlierRuns(ctx context.Context) error {
	s, err := h.c.Stream(ctx, remote.StepsStream)
	if err != nil {
		return err
	}
	filter := remote.TaskSteps(h.r.t.id)
	var queued uint64
	err = h.c.Do(ctx, "drop the attempts of the task's earlier runs", func(ctx context.Context) error {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err != nil {
			return err
		}
		queued = 0
		for _, n := range info.State.Subjects {
			queued += n
		}
		if queued == 0 {
			return nil
		}
		return s.Purge(ctx, jetstream.WithPurgeSubject(filter))
	})
	if err == nil && queued > 0 {
		fmt.Fprintf(h.r.e.opts.Stderr, "apollo: dropped %d attempt(s) of an earlier run of task %s from the hub's work queue: "+
			"this new log does not follow them\n", queued, h.r.t.id)
	}
	return err
}

// secret is the secret of attempt n of step in this run.
func (h *hubRun) secret(step string, n int) string {
	return remote.AttemptSecret(h.key, remote.DispatchID(h.run, h.r.t.id, step, n))
}

// maxRefusals bounds the WARNINGs of refused reports in one run: a client
// that floods the hub with them does not fill the log.
const maxRefusals = 100

// refuse records a report that is not the attempt's: it lacks the secret
// of the attempt's dispatch, or came on another pool's subject. A WARNING
// names the sender as it named itself and the subject it used; nothing
// else of the report is taken.
func (h *hubRun) refuse(ev *remote.Event, seq int64, subject, why string) error {
	h.refused++
	if h.refused > maxRefusals {
		return nil
	}
	// Everything in it is the sender's word: bounded, and a step this
	// pipeline does not have is named in the message only.
	msg := fmt.Sprintf("hub event %q of step %s attempt %d refused: %s; it was sent by a client of the hub calling itself worker %q, on subject %s, "+
		"and is not recorded", textfmt.OneLine(ev.Type, 40), textfmt.OneLine(ev.Step, 200), ev.Attempt, why,
		textfmt.OneLine(ev.Worker, 200), textfmt.OneLine(subject, 300))
	if h.refused == maxRefusals {
		msg += fmt.Sprintf("; this is the %dth refused event of this run: further ones are not written to the log", maxRefusals)
	}
	step := ev.Step
	if h.r.t.p.Step(step) == nil && h.r.node(step) == nil {
		step = ""
	}
	return h.r.w.AppendUnsynced(&eventlog.Record{EventType: eventlog.Warning, StepID: step, Status: eventlog.Running,
		RetryCount: ev.Attempt, Message: bounded(msg), Worker: textfmt.OneLine(ev.Worker, 200), SrcSeq: seq})
}

// poolOf is the pool a node's attempts go to.
func (h *hubRun) poolOf(n *node) string { return h.stepPool(n.rs.step) }

// stepPool is the pool a step's attempts go to: its own, or the run's.
func (h *hubRun) stepPool(s *pipeline.Step) string {
	if s.Pool != "" {
		return s.Pool
	}
	return h.pool
}

// pools lists the pools the task's attempts go to: its steps' and those of
// the attempts in flight when the run started.
func (h *hubRun) pools() []string {
	seen := map[string]bool{}
	var pools []string
	add := func(p string) {
		if p != "" && !seen[p] { // an attempt's pool is "" until adopted: its step's, then
			seen[p] = true
			pools = append(pools, p)
		}
	}
	for _, s := range h.r.t.p.Steps {
		add(h.stepPool(s))
	}
	h.mu.Lock()
	for _, sl := range h.slots {
		add(sl.pool)
	}
	h.mu.Unlock()
	return pools
}

// quiesce stops taking in events: called when the scheduler has ended,
// before the summary, so that no derived record follows it.
func (r *taskRun) quiesce() {
	h := r.hub
	if h == nil || h.stopIngest == nil {
		return
	}
	h.stopIngest()
	<-h.ingestDone
}

// stopHub releases the lease and closes the connection.
func (r *taskRun) stopHub() {
	h := r.hub
	if h == nil || h.c == nil {
		return
	}
	r.quiesce()
	if h.stopOther != nil {
		h.stopOther()
		h.otherDone.Wait()
	}
	if h.lease != nil && h.failErr == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*h.c.Config().CallTimeout)
		_ = h.lease.Release(ctx)
		cancel()
	}
	h.c.Close()
}

// fail stops the run: the hub was unreachable past the limit, or the lease
// was taken over.
func (h *hubRun) fail(err error) {
	h.failOnce.Do(func() {
		h.failErr = &HubError{TaskID: h.r.t.id, Err: err}
		close(h.failed)
		if h.stopLog != nil {
			h.stopLog(h.failErr)
		}
	})
}

// renew renews the lease a third of its life apart. A renewal that has not
// succeeded once the lease's TTL has passed since the last one that did
// stops the run: the hub may have let the lease lapse, and another
// coordinator may hold the task now (a hub without a majority, or cut off
// from this one).
func (h *hubRun) renew(ctx context.Context) {
	ttl := h.lease.TTL()
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(ctx, last.Add(ttl))
		err := h.lease.Renew(rctx)
		cancel()
		if err == nil {
			last = sent
			h.noteRenewed(sent)
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if rctx.Err() != nil {
			err = fmt.Errorf("the task's lease on the hub could not be renewed for %s, its time to live (%v): another coordinator may hold the task now, so this one stops", ttl, err)
		}
		h.fail(err)
		return
	}
}

// noteRenewed records that a write of the lease sent at sent was stored.
func (h *hubRun) noteRenewed(sent time.Time) {
	h.mu.Lock()
	h.renewedAt = sent
	h.mu.Unlock()
}

// mayCancel reports whether a run that stops waiting for its attempts asks
// their workers to end them: only when it was interrupted — not when it
// stops on a failure of its log or of the hub, after which the next run
// adopts them — and only while this coordinator surely still holds the
// task's lease: one paused past it may find another coordinator holding
// the task, which has adopted those very attempts.
func (h *hubRun) mayCancel(ctx context.Context) bool {
	var f *runFailed
	if errors.As(context.Cause(ctx), &f) {
		return false
	}
	select {
	case <-h.failed:
		return false
	default:
	}
	h.mu.Lock()
	at := h.renewedAt
	h.mu.Unlock()
	return !at.IsZero() && time.Since(at) < h.lease.TTL()*3/4
}

// cancelRemote asks the workers to end the task's attempts in flight, each
// named (the run was interrupted, and mayCancel allows it), once. Not while
// the connection is down: the client would keep the request and send it on
// reconnecting, when the task may be another coordinator's.
func (h *hubRun) cancelRemote() {
	h.cancelled.Do(func() {
		if !h.c.NC.IsConnected() {
			return
		}
		req := &remote.Cancel{}
		h.mu.Lock()
		for id, sl := range h.slots {
			if sl.open {
				req.Attempts = append(req.Attempts, remote.CancelAttempt{Step: id, Attempt: sl.n})
			}
		}
		h.mu.Unlock()
		if len(req.Attempts) > 0 {
			h.askCancel(req)
		}
	})
}

// askCancel publishes req, which names the attempts to end.
func (h *hubRun) askCancel(req *remote.Cancel) {
	data, err := json.Marshal(req)
	if err != nil {
		return
	}
	_ = h.c.NC.Publish(remote.CancelSubject(h.r.t.id), data)
	_ = h.c.NC.FlushTimeout(h.c.Config().CallTimeout)
}

// syncMarkers makes the hub's idem bucket hold the task's markers as the
// log does, for the markers no attempt in flight may be setting: a marker
// the log does not know was set by an attempt that never reported it, so
// its guarded code never ran.
func (h *hubRun) syncMarkers(ctx context.Context) error {
	mk, err := h.c.Markers(ctx, "", h.r.t.id)
	if err != nil {
		return err
	}
	inHub, err := mk.All(ctx)
	if err != nil {
		return err
	}
	for _, m := range inHub {
		if sl := h.slots[m.Step]; sl != nil && sl.open {
			continue
		}
		want, ok := h.r.markers.Marker(m.Name)
		if ok && want.State == m.State && string(want.Result) == string(m.Result) {
			continue
		}
		reset := remote.Marker{Name: m.Name, Pool: m.Pool}
		if ok {
			reset.State, reset.Result = want.State, want.Result
		}
		if err := mk.Reset(ctx, reset); err != nil {
			return err
		}
	}
	return nil
}

// ingest appends what one event of the hub means for the log. An event of
// this run is taken only when it carries the secret of its attempt's
// dispatch, and, for the step's current attempt, came on the subject of
// the pool it was dispatched to; anything else is a WARNING (refuse).
func (h *hubRun) ingest(data []byte, seq int64, subject string) error {
	r := h.r
	var ev remote.Event
	if err := json.Unmarshal(data, &ev); err != nil {
		return r.w.AppendUnsynced(&eventlog.Record{EventType: eventlog.Warning, Status: eventlog.Running, SrcSeq: seq,
			Message: fmt.Sprintf("hub event %d is not an apollo event (%v); ignored", seq, err)})
	}
	if ev.Run != h.run {
		return nil // another run of the same task id (a fresh log, another state folder)
	}
	if ev.Task != r.t.id || !remote.SameSecret(ev.Secret, h.secret(ev.Step, ev.Attempt)) {
		return h.refuse(&ev, seq, subject, "it does not carry the secret of that attempt's dispatch, so it does not come from the worker that was given it")
	}
	h.mu.Lock()
	sl := h.slots[ev.Step]
	current := sl != nil && sl.open && sl.n == ev.Attempt
	pool := ""
	if sl != nil {
		pool = sl.pool
	}
	h.mu.Unlock()
	if from := remote.SubjectPool(subject); current && pool != "" && from != pool {
		return h.refuse(&ev, seq, subject, fmt.Sprintf("it came from pool %s, but the attempt was dispatched to pool %s", from, pool))
	}
	if ev.Type == remote.EventMarker && ev.Marker != nil {
		rec := &eventlog.Record{EventType: eventlog.Marker, StepID: ev.Step, Status: eventlog.Running,
			RetryCount: ev.Attempt, Worker: ev.Worker, SrcSeq: seq,
			Marker: &eventlog.MarkerInfo{Name: ev.Marker.Name, State: ev.Marker.State, Result: ev.Marker.Result}}
		if err := r.w.AppendDurable(rec); err != nil {
			return err
		}
		r.markers.Observe(rec)
		return nil
	}
	if ev.Type == remote.EventEnd && len(ev.Tail) > 0 && r.t.p.Step(ev.Step) != nil {
		// The output's last piece, carried by the end: written after the
		// pieces before it, before the STEP_END.
		if current {
			h.out.wait(ev.Step, ev.Attempt, ev.OutBytes)
		}
		h.out.write(&remote.Output{Step: ev.Step, Attempt: ev.Attempt, Offset: ev.OutBytes, Data: ev.Tail})
	}
	if !current {
		return h.stale(&ev, seq, sl)
	}
	switch ev.Type {
	case remote.EventStarted:
		if sl.started {
			return nil
		}
		rec := &eventlog.Record{EventType: eventlog.StepStart, StepID: ev.Step, Status: eventlog.Running,
			RetryCount: ev.Attempt, InputDigest: h.inputOf(ev.Step), Worker: ev.Worker, SrcSeq: seq}
		rec.Image, rec.ImageID = ev.Image, ev.ImageID // a container step's, as the worker's engine resolved it
		if err := r.w.AppendUnsynced(rec); err != nil {
			return err
		}
		if h.log != nil && h.log.OneByOne() {
			// Published while the body runs, so the end's append, which
			// the next step waits for, finds it done. A replicated log
			// takes it along with the end instead, in one atomic batch
			// (hubLinger).
			r.w.PublishSoon()
		}
		h.mu.Lock()
		sl.started = true
		h.mu.Unlock()
		if r.rep != nil {
			r.rep.Started(ev.Step, ev.Attempt)
		}
	case remote.EventEnd:
		h.out.wait(ev.Step, ev.Attempt, ev.OutBytes)
		return h.end(&ev, seq, sl)
	case remote.EventLost:
		rec := lostRecord(ev.Step, ev.Attempt, fmt.Sprintf("its worker went silent past the liveness deadline and the hub delivered it again (delivery %d, reported by %s)",
			ev.Delivery, ev.Worker))
		rec.Worker, rec.SrcSeq = ev.Worker, seq
		if err := r.w.AppendDurable(rec); err != nil {
			return err
		}
		if r.rep != nil {
			r.rep.Event(ev.Step, fmt.Sprintf("attempt %d LOST (worker silent)", ev.Attempt))
		}
		h.close(sl, outcome{lost: true, err: errors.New(rec.ErrorMessage)})
	}
	return nil
}

// lostRecord is the LOST record of a step's attempt n, saying why.
func lostRecord(step string, n int, why string) *eventlog.Record {
	return &eventlog.Record{EventType: eventlog.Lost, StepID: step, Status: eventlog.Running, RetryCount: n,
		ErrorMessage: fmt.Sprintf("attempt %d lost: %s; it is treated as cut off by a crash: cleanup, then the next attempt", n, why)}
}

// inputOf is the input digest of a step's latest attempt, as its DISPATCH
// recorded it.
func (h *hubRun) inputOf(step string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sl := h.slots[step]; sl != nil {
		return sl.input
	}
	return ""
}

// close ends a slot's attempt with its outcome.
func (h *hubRun) close(sl *slot, o outcome) {
	h.mu.Lock()
	sl.open = false
	h.mu.Unlock()
	sl.done <- o
}

// stale records an event of an attempt that is not the step's open one: a
// superseded attempt's late start or end becomes a WARNING only (at most
// one STEP_END per attempt); a loss of an attempt that has ended is
// ignored.
func (h *hubRun) stale(ev *remote.Event, seq int64, sl *slot) error {
	r := h.r
	var msg string
	switch ev.Type {
	case remote.EventLost:
		return nil // the attempt ended before (its end was stored before its acknowledgement was lost)
	case remote.EventStarted:
		msg = fmt.Sprintf("late start of attempt %d of step %s on worker %s, which is no longer the step's current attempt; "+
			"not recorded as a start", ev.Attempt, ev.Step, ev.Worker)
	case remote.EventEnd:
		outcome := "succeeded"
		if ev.Error != "" {
			outcome = "failed: " + ev.Error
		}
		msg = fmt.Sprintf("late end of attempt %d of step %s from worker %s (%s), which is no longer the step's current attempt; "+
			"not recorded as the step's end", ev.Attempt, ev.Step, ev.Worker, outcome)
	default:
		msg = fmt.Sprintf("hub event %q of step %s attempt %d ignored", ev.Type, ev.Step, ev.Attempt)
	}
	if r.t.p.Step(ev.Step) == nil {
		msg = fmt.Sprintf("hub event %q names step %s, which this pipeline does not have; ignored", ev.Type, ev.Step)
	}
	return r.w.AppendUnsynced(&eventlog.Record{EventType: eventlog.Warning, StepID: ev.Step, Status: eventlog.Running,
		RetryCount: ev.Attempt, Message: bounded(msg), Worker: ev.Worker, SrcSeq: seq})
}

// hubWaiting returns what a client of the hub says when a call has had no
// answer for a few seconds: what it waits for, instead of nothing.
func hubWaiting(w io.Writer, who string) func(what string, waited time.Duration, cause error) {
	return func(what string, waited time.Duration, cause error) {
		fmt.Fprintf(w, "%s: waiting for the hub: no answer to %q for %s (%v); still trying, until APOLLO_HUB_GIVE_UP\n",
			who, what, waited.Round(time.Second), cause)
	}
}
