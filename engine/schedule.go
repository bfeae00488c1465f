package engine

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"apollo/eventlog"
)

// buildNodes turns the pipeline and the replayed state into the nodes this
// invocation schedules.
func (r *run) buildNodes(resumeFrom string) {
	p := r.t.p
	var rerun map[string]bool
	if resumeFrom != "" {
		rerun = descendants(p, resumeFrom)
	}
	now := r.e.opts.Now()
	r.byID = make(map[string]*node, len(p.Steps))
	r.nodes = make([]*node, len(p.Steps))
	for i, rs := range r.t.steps {
		st := r.state.Step(rs.step.ID)
		n := &node{rs: rs, idx: i,
			plan:     decide(rs.step, st, resumeFrom, rerun, p.MaxDirtyRestarts, now),
			dirty:    st.Dirty,
			unclean:  st.Unclean,
			prevPGID: st.PGID,
			lastErr:  st.LastError,
		}
		n.retry = n.plan.NextRetry
		if st.Attempts > 0 {
			n.prevToken = attemptToken(r.absLog, rs.step.ID, st.RetryCount)
		}
		if n.plan.Action == ActionKeep {
			n.final = st.Status
			n.outDigest = st.OutputDigest
			n.output = st.Output
		}
		r.nodes[i] = n
		r.byID[rs.step.ID] = n
	}
	for _, n := range r.nodes {
		for _, d := range n.rs.step.DependsOn {
			dep := r.byID[d]
			n.deps = append(n.deps, dep)
			dep.children = append(dep.children, n)
		}
	}
}

// nodeDone is a worker's report to the scheduler.
type nodeDone struct {
	n       *node
	status  string // SUCCESS, FAILED, or RUNNING when a retry is due
	delay   time.Duration
	err     error // the attempt's failure, for the summary
	logErr  error // the log could not be written: the run must stop
	attempt int
	// unsynced: the attempt's STEP_END (durability always) is written but
	// no fsync of it has started; the scheduler sees to one.
	unsynced bool
}

// readyQueue orders runnable steps by their place in the file.
type readyQueue []*node

func (q readyQueue) Len() int           { return len(q) }
func (q readyQueue) Less(i, j int) bool { return q[i].idx < q[j].idx }
func (q readyQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *readyQueue) Push(x any)        { *q = append(*q, x.(*node)) }
func (q *readyQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// schedule runs the DAG: independent steps in parallel up to the limit, a
// step once every dependency is satisfied, until nothing more can run.
func (r *run) schedule(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)

	kept := 0
	for _, n := range r.nodes {
		if n.final != "" {
			kept++
		}
	}
	r.rep = newReporter(r.e.opts.Progress, r.e.opts.Stdout, r.e.opts.Color, r.e.opts.Now)
	r.rep.begin(r.t.id, r.logPath, len(r.nodes), kept)

	var logErr error
	// Steps that this invocation settles without running them.
	for _, i := range topoOrder(r.t.p) {
		n := r.nodes[i]
		switch n.plan.Action {
		case ActionSkip:
			if err := r.endWithoutRunning(n, eventlog.Skipped, "skipped: "+n.plan.Reason); err != nil {
				logErr = err
			}
		case ActionCrashLoop:
			if n.dirty {
				endLeftovers(n.prevToken, n.prevPGID, r.e.opts.KillGrace)
			}
			msg := fmt.Sprintf("crash loop: attempt cut off by a crash in each of the last %d runs, so it is not run again; "+
				"fix the cause, then run `apollo run %s --resume-from %s` to run it again",
				r.t.p.MaxDirtyRestarts, r.t.p.Path, n.id())
			if err := r.endWithoutRunning(n, eventlog.Failed, msg); err != nil {
				logErr = err
			}
		}
		if logErr != nil {
			break
		}
	}

	ready := &readyQueue{}
	done := make(chan nodeDone)
	retryDue := make(chan *node)
	running, waitingRetries := 0, 0
	stopping := logErr != nil
	endsUnsynced := false // a STEP_END (always) waits for the scheduler's fsync

	// Initial readiness.
	for _, n := range r.nodes {
		if n.final != "" {
			continue
		}
		for _, d := range n.deps {
			if !d.satisfies() {
				n.waiting++
			}
		}
	}
	for _, n := range r.nodes {
		if n.final == eventlog.Failed && !n.rs.step.Optional {
			r.block(n)
		}
	}
	for _, n := range r.nodes {
		if n.final == "" && !n.blocked && n.waiting == 0 {
			if wait := time.Duration(n.plan.WaitMS) * time.Millisecond; wait > 0 {
				waitingRetries++
				r.after(ctx, wait, n, retryDue)
			} else {
				heap.Push(ready, n)
			}
		}
	}

	settle := func(n *node) {
		for _, c := range n.children {
			if n.satisfies() {
				if c.waiting--; c.waiting == 0 && !c.blocked && c.final == "" {
					heap.Push(ready, c)
				} else if c.waiting == 1 {
					r.warmJoin(c)
				}
			}
		}
		if n.final == eventlog.Failed && !n.rs.step.Optional {
			r.block(n)
		}
	}

	// ended takes the end of a step's attempt.
	ended := func(d nodeDone) {
		n := d.n
		endsUnsynced = endsUnsynced || d.unsynced
		if d.logErr != nil {
			if logErr == nil {
				logErr = d.logErr
				stopping = true
				cancel(d.logErr)
			}
			return
		}
		switch d.status {
		case eventlog.Running: // a retry is due
			if stopping {
				return
			}
			waitingRetries++
			r.after(ctx, d.delay, n, retryDue)
		default:
			n.final = d.status
			if d.err != nil {
				n.lastErr = d.err.Error()
			}
			settle(n)
		}
	}

loop:
	for {
		if ctx.Err() != nil {
			stopping = true // interrupted: nothing new starts
		}
		if r.snap.due() {
			r.snap.write()
		}
		for !stopping && running < r.t.parallel && ready.Len() > 0 {
			n := heap.Pop(ready).(*node)
			if n.blocked || n.final != "" {
				continue
			}
			n.started = true
			// Every step started appends a durable record (its STEP_START
			// or CLEANUP), whose fsync covers the STEP_ENDs before it.
			endsUnsynced = false
			if running == 0 && ready.Len() == 0 && waitingRetries == 0 {
				// Nothing else runs, and nothing can become ready before n
				// ends (a chain, or the last step): n runs on this
				// goroutine. Handing its end back from another one would
				// wake this one, once a step.
				if r.warmUp(n) {
					// Let the goroutine starting the next shell run now
					// (this one is picked up by the other processor), not
					// once this one blocks: a shell started late is waited
					// for.
					runtime.Gosched()
				}
				ended(r.work(ctx, n))
				continue loop
			}
			running++
			go func() { done <- r.work(ctx, n) }()
			r.warmUp(n)
		}
		if running == 0 && (stopping || (ready.Len() == 0 && waitingRetries == 0)) {
			break // the summary, or closing the log, makes every record durable
		}
		if endsUnsynced {
			// Nothing was started to carry the STEP_END to disk: start its
			// fsync now, without waiting for it.
			r.w.SyncSoon()
			endsUnsynced = false
		}
		select {
		case d := <-done:
			running--
			ended(d)
		case n := <-retryDue:
			waitingRetries--
			if !stopping {
				heap.Push(ready, n)
			}
		case <-ctx.Done():
			if !stopping {
				stopping = true
			}
			// Pending retries will not fire; stop counting them.
			waitingRetries = 0
			// Keep draining done until every worker is back.
			if running == 0 {
				continue
			}
			d := <-done
			running--
			if d.logErr != nil && logErr == nil {
				logErr = d.logErr
			}
			if d.status != eventlog.Running {
				d.n.final = d.status
				if d.err != nil {
					d.n.lastErr = d.err.Error()
				}
			}
		}
	}

	r.dropWarm()
	interrupted := parent.Err() != nil
	if logErr != nil {
		r.rep.finish("")
		return logErr
	}
	return r.summarize(interrupted)
}

// after makes n ready again once d has passed, unless ctx ends first.
func (r *run) after(ctx context.Context, d time.Duration, n *node, due chan<- *node) {
	go func() {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			select {
			case due <- n:
			case <-ctx.Done():
			}
		case <-ctx.Done():
		}
	}()
}

// appendFor appends a step's record with the step's durability: always
// waits for the fsync; batch lets it share a later one. Either way the
// STEP_START of a dependent, which is always durable, comes after it in the
// file, so a STEP_END is on disk before any step that depends on it starts.
func (r *run) appendFor(s *Step, rec *eventlog.Record) error {
	if s.Durability == DurabilityBatch {
		return r.w.Append(rec)
	}
	return r.w.AppendDurable(rec)
}

// makeDirs creates the folders an attempt writes to, once per run each.
func (r *run) makeDirs(dirs ...string) error {
	r.dirsMu.Lock()
	defer r.dirsMu.Unlock()
	for _, dir := range dirs {
		if _, ok := r.dirsMade[dir]; ok {
			continue
		}
		if err := eventlog.MkdirAll(r.e.fs(), dir); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
		if r.dirsMade == nil {
			r.dirsMade = make(map[string]struct{})
		}
		r.dirsMade[dir] = struct{}{}
	}
	return nil
}

// block marks every descendant of a failed required step as blocked.
func (r *run) block(n *node) {
	for _, c := range n.children {
		if !c.blocked && c.final == "" {
			c.blocked = true
			r.dropWarmOf(c)
			r.block(c)
		}
	}
}

// endWithoutRunning writes a STEP_END for a step this invocation settles
// without running it.
func (r *run) endWithoutRunning(n *node, status, msg string) error {
	rec := &eventlog.Record{EventType: eventlog.StepEnd, StepID: n.id(), Status: status,
		RetryCount: max(n.retry-1, 0), ErrorMessage: msg}
	if err := r.appendFor(n.rs.step, rec); err != nil {
		return err
	}
	n.final = status
	n.lastErr = msg
	r.rep.ended(n.id(), status, rec.RetryCount, 0, msg, 0)
	return nil
}

// work runs one step: ends what a crash left of its previous attempt,
// cleans up after a failed one, then makes one attempt.
func (r *run) work(ctx context.Context, n *node) nodeDone {
	s := n.rs.step
	if n.dirty || (n.unclean && s.hasCleanup()) {
		if d, ok := r.cleanup(ctx, n); !ok {
			return d
		}
	}
	return r.attempt(ctx, n)
}

// cleanup runs before a rerun. It returns ok=false with the step's end when
// the step must not run.
func (r *run) cleanup(ctx context.Context, n *node) (nodeDone, bool) {
	s := n.rs.step
	var notes []string
	if n.dirty && n.prevToken != "" {
		if k := endLeftovers(n.prevToken, n.prevPGID, r.e.opts.KillGrace); k > 0 {
			notes = append(notes, fmt.Sprintf("ended %d process(es) left running by the cut-off attempt", k))
		}
	}
	rec := &eventlog.Record{EventType: eventlog.Cleanup, StepID: s.ID, Status: eventlog.Pending,
		RetryCount: max(n.retry-1, 0), Dirty: n.dirty}
	began := r.e.opts.Now()
	if s.hasCleanup() {
		// The failed attempt's STEP_END is on disk before its cleanup runs
		// (a no-op unless its fsync is still under way).
		if err := r.w.Sync(); err != nil {
			return nodeDone{n: n, logErr: err}, false
		}
		r.rep.event(s.ID, "cleanup before rerun")
		r.e.crash("cleanup:before")
		res := r.runCleanup(ctx, n)
		r.e.crash("cleanup:after")
		rec.DurationMS = r.e.opts.Now().Sub(began).Milliseconds()
		if res.ExitCode != 0 || res.Err != nil {
			code := res.ExitCode
			rec.ExitCode = &code
		}
		if res.Err != nil {
			rec.Status = eventlog.Failed
			rec.ErrorMessage = "cleanup failed, so the step is not rerun (its state is unknown): " + res.Err.Error()
		} else {
			notes = append(notes, "cleanup hook succeeded")
		}
	} else if n.dirty {
		notes = append(notes, "no cleanup hook")
	}
	if n.dirty {
		notes = append([]string{fmt.Sprintf("attempt %d was cut off by a crash", rec.RetryCount)}, notes...)
	}
	rec.Message = strings.Join(notes, "; ")
	if err := r.appendFor(s, rec); err != nil {
		return nodeDone{n: n, logErr: err}, false
	}
	n.dirty, n.unclean = false, rec.Status == eventlog.Failed
	if rec.Status == eventlog.Failed {
		r.rep.ended(s.ID, eventlog.Failed, rec.RetryCount, 0, rec.ErrorMessage, 0)
		return nodeDone{n: n, status: eventlog.Failed, err: errors.New(rec.ErrorMessage)}, false
	}
	return nodeDone{}, true
}

// runCleanup runs the step's cleanup hook through its executor.
func (r *run) runCleanup(ctx context.Context, n *node) Result {
	s := n.rs.step
	retry := max(n.retry-1, 0)
	a := r.newAttempt(n, retry)
	a.Upstream = upstreamOutputs(n)
	a.OutputPath = strings.TrimSuffix(a.OutputPath, ".log") + ".cleanup.log"
	a.PublishPath = ""
	a.Started = func(int) error { return nil }
	a.Cleanup = true
	var ex Executor
	if s.CleanupCommand != "" {
		a.Command = n.rs.cleanupCommand
		ex = r.e.opts.Executors["shell"]
	} else {
		var err error
		if ex, err = r.luaExecutor(s); err != nil {
			return Result{Err: err, ExitCode: -1}
		}
	}
	actx, cancel := attemptContext(ctx, s.Timeout)
	defer cancel()
	return ex.Run(actx, a)
}

// upstreamOutputs is what n's dependencies published, by step id.
func upstreamOutputs(n *node) map[string]json.RawMessage {
	upstream := make(map[string]json.RawMessage, len(n.deps))
	for _, d := range n.deps {
		upstream[d.id()] = d.output
	}
	return upstream
}

func attemptContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		return context.WithTimeoutCause(ctx, timeout, errTimeout)
	}
	return context.WithCancel(ctx)
}

// newAttempt describes attempt retry of n for an executor, all but its
// Upstream (upstreamOutputs): it reads nothing a running step may change,
// so that warmUp can call it while n's dependencies run.
func (r *run) newAttempt(n *node, retry int) *Attempt {
	s := n.rs.step
	t := r.t
	keys := make([]string, 0, len(n.rs.env))
	for k := range n.rs.env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	env := make([]string, 0, len(r.baseEnv)+len(keys)+7)
	env = append(env, r.baseEnv...)
	for _, k := range keys {
		env = append(env, k+"="+n.rs.env[k])
	}
	out := t.lay.outputPath(t.id, s.ID, retry)
	publish := strings.TrimSuffix(out, ".log") + ".out"
	env = append(env,
		"APOLLO_TASK_ID="+t.id,
		"APOLLO_STEP_ID="+s.ID,
		"APOLLO_RETRY_COUNT="+strconv.Itoa(retry),
		"APOLLO_ARTIFACTS_DIR="+t.lay.artifactsDir(t.id),
		"APOLLO_STATE_DIR="+t.lay.root,
		"APOLLO_OUTPUT="+publish,
		attemptEnv+"="+attemptToken(r.absLog, s.ID, retry),
	)
	vars := make(map[string]string, len(t.vars)+1)
	for k, v := range t.vars {
		vars[k] = v
	}
	vars["step_id"] = s.ID
	return &Attempt{TaskID: t.id, StepID: s.ID, RetryCount: retry, Step: s, Command: n.rs.command,
		Env: env, Dir: r.e.opts.Workdir, OutputPath: out, OutputLimit: max(r.e.opts.MaxOutputBytes, 0),
		PublishPath: publish, KillGrace: r.e.opts.KillGrace,
		Pipeline: t.p, Vars: vars, Params: n.rs.with,
		ArtifactsDir: t.lay.artifactsDir(t.id), StateDir: t.lay.root, Markers: r.markers}
}

// executorFor picks the executor of a step's body.
func (r *run) executorFor(s *Step) (Executor, error) {
	if s.Command == "" {
		return r.luaExecutor(s)
	}
	return r.e.opts.Executors["shell"], nil
}

// luaExecutor runs Lua in this process, or in a child apollo process for
// isolation: process.
func (r *run) luaExecutor(s *Step) (Executor, error) {
	if s.Isolation == "process" {
		bin, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("isolation: process: find the apollo binary: %w", err)
		}
		return &Isolated{Binary: bin, LogPath: r.logPath}, nil
	}
	ex, ok := r.e.opts.Executors["lua"]
	if !ok {
		return nil, errors.New("no executor for Lua steps in this build")
	}
	return ex, nil
}

// attempt makes one attempt of n and records it.
func (r *run) attempt(ctx context.Context, n *node) nodeDone {
	s := n.rs.step
	t := r.t
	retry := n.retry
	n.retry++
	n.attempts++
	upstream := make(map[string]string, len(n.deps))
	for _, d := range n.deps {
		upstream[d.id()] = d.outDigest
	}
	input := inputDigest(n.rs, upstream)
	// The STEP_START goes first, and Started waits for its fsync before the
	// body may run, whatever the durability setting. For a shell body
	// started here the fsync starts at once, so the disk works while the
	// attempt is prepared and its process forked (held: forking blocks this
	// thread). A Lua body, or a shell started ahead (warmUp), calls Started
	// right away, which then does the fsync on this goroutine instead of
	// waking one to do it. A crash in between leaves a dirty step whose body
	// never ran; its rerun is preceded by cleanup, as for any dirty step.
	a := r.takeWarm(n)
	start := &eventlog.Record{EventType: eventlog.StepStart, StepID: s.ID, Status: eventlog.Running,
		RetryCount: retry, InputDigest: input}
	appendStart := r.w.AppendSyncing
	if s.Command == "" || a != nil {
		appendStart = r.w.AppendUnsynced
	}
	if err := appendStart(start); err != nil {
		if a != nil {
			a.held.close()
		}
		return nodeDone{n: n, logErr: err}
	}
	if a == nil {
		a = r.newAttempt(n, retry)
	}
	a.Upstream = upstreamOutputs(n)
	a.InputDigest = input
	if err := r.makeDirs(filepath.Dir(a.OutputPath), t.lay.artifactsDir(t.id)); err != nil {
		if a.held != nil {
			a.held.close()
		}
		return nodeDone{n: n, logErr: err}
	}
	began := r.e.opts.Now()
	a.Started = func(int) error {
		// While the STEP_START's fsync may still be running: a file left
		// by an earlier run is not this attempt's output. Only a shell
		// body's is read.
		if s.Command != "" {
			os.Remove(a.PublishPath)
		}
		if err := r.w.Sync(); err != nil {
			return err
		}
		began = r.e.opts.Now()
		r.rep.started(s.ID, retry)
		return nil
	}
	a.Running = func(pgid int) {
		// The process group, for a later run to end what a crash leaves
		// running (SPEC §5: the STEP_START or a record right after names
		// it), written while the body runs. Until it is on disk the
		// processes are still found by their APOLLO_ATTEMPT tag and their
		// shell, which leads the group. A failed write is the writer's
		// sticky error, which the STEP_END's append reports.
		rec := &eventlog.Record{EventType: eventlog.StepProcess, StepID: s.ID, Status: eventlog.Running,
			RetryCount: retry, PGID: pgid}
		_ = r.w.AppendUnsynced(rec)
	}
	ex, err := r.executorFor(s)
	var res Result
	if err != nil {
		res = Result{Err: err, ExitCode: -1, NotStarted: true}
		if serr := a.Started(0); serr != nil {
			return nodeDone{n: n, logErr: serr}
		}
	} else {
		actx, cancel := attemptContext(ctx, s.Timeout)
		res = ex.Run(actx, a)
		cancel()
		r.e.crash("body:after")
		if res.NotStarted {
			var we *eventlog.WriteError
			if errors.As(res.Err, &we) || r.w.Err() != nil {
				return nodeDone{n: n, logErr: res.Err}
			}
		}
	}
	dur := r.e.opts.Now().Sub(began)
	rec := &eventlog.Record{EventType: eventlog.StepEnd, StepID: s.ID, RetryCount: retry,
		InputDigest: input, OutputDigest: res.OutputDigest, DurationMS: dur.Milliseconds(),
		TimedOut: res.TimedOut, Interrupted: res.Interrupted, Message: res.Note}
	if res.ExitCode != 0 {
		code := res.ExitCode
		rec.ExitCode = &code
	}
	d := nodeDone{n: n, attempt: retry}
	switch {
	case res.Err == nil:
		rec.Status = eventlog.Success
		rec.Output = res.Output
		n.outDigest = res.OutputDigest
		n.output = res.Output
		d.status = eventlog.Success
	case r.mayRetry(ctx, n, res):
		d.delay = retryDelay(r.t.p, s, n.attempts)
		rec.Status = eventlog.Running
		rec.ErrorMessage = res.Err.Error()
		rec.NextDelayMS = d.delay.Milliseconds()
		d.status = eventlog.Running
		n.unclean = true
	default:
		rec.Status = eventlog.Failed
		rec.ErrorMessage = res.Err.Error()
		d.status = eventlog.Failed
		d.err = res.Err
		n.unclean = true
	}
	// The STEP_END is written without an fsync of its own: the scheduler
	// starts a dependent next, whose durable STEP_START (before its body
	// runs) carries this record to disk in the same fsync, or, when it
	// starts nothing, an fsync at once. So a STEP_END is durable before
	// anything acts on it, with one fsync per step instead of two.
	if err := r.w.AppendUnsynced(rec); err != nil {
		return nodeDone{n: n, logErr: err}
	}
	d.unsynced = s.Durability != DurabilityBatch
	shown := rec.Status
	if shown == eventlog.Running {
		shown = "RETRY"
	}
	r.rep.ended(s.ID, shown, retry, dur, rec.ErrorMessage, d.delay)
	return d
}

// mayRetry reports whether a failed attempt gets another one in this
// invocation.
func (r *run) mayRetry(ctx context.Context, n *node, res Result) bool {
	s := n.rs.step
	if ctx.Err() != nil || res.Interrupted || s.RetryPolicy == RetryNone || s.RetryPolicy == "" {
		return false
	}
	return n.attempts <= s.MaxRetries
}

// retryDelay is the wait before retry number k (k ≥ 1) of a step (SPEC §2):
// fixed is the base delay; exponential doubles it each time, capped by
// max_retry_delay_seconds, and never overflows.
func retryDelay(p *Pipeline, s *Step, k int) time.Duration {
	base := p.RetryDelay
	if s.RetryPolicy != RetryExponential || k <= 1 {
		return capDelay(base, p.MaxRetryDelay)
	}
	d := base
	for i := 1; i < k; i++ {
		if d > maxDelay/2 {
			d = maxDelay
			break
		}
		d *= 2
		if p.MaxRetryDelay > 0 && d >= p.MaxRetryDelay {
			break
		}
	}
	return capDelay(d, p.MaxRetryDelay)
}

// maxDelay bounds any retry delay: a week is longer than any sane backoff
// and far from overflowing time.Duration.
const maxDelay = 7 * 24 * time.Hour

func capDelay(d, limit time.Duration) time.Duration {
	if limit > 0 && d > limit {
		d = limit
	}
	if d > maxDelay {
		d = maxDelay
	}
	return d
}
