package engine

import (
	"container/heap"
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/engine/progress"
	"apollo/eventlog"
)

// buildNodes turns the pipeline and the replayed state into the nodes this
// invocation schedules.
func (r *taskRun) buildNodes(sc scope) error {
	p := r.t.p
	now := r.e.opts.Clock.Now()
	r.byID = make(map[string]*node, len(p.Steps))
	r.nodes = make([]*node, len(p.Steps))
	for i, rs := range r.t.steps {
		st := r.state.Step(rs.step.ID)
		n := r.newNode(rs, i, st, decide(rs.step, st, sc, p.MaxDirtyRestarts, now))
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
	// A foreach template that expanded in an earlier run: its instances, as
	// its STEP_END recorded them.
	for _, n := range slices.Clone(r.nodes) {
		if n.rs.step.Foreach != nil && n.final == eventlog.Success {
			if _, err := r.instancesOf(n, n.output, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// newNode is the node of step rs at index idx, its state st replayed from
// the log and plan what this invocation does with it.
func (r *taskRun) newNode(rs *renderedStep, idx int, st *eventlog.StepState, plan PlanStep) *node {
	n := &node{rs: rs, idx: idx,
		plan:      plan,
		dirty:     st.Dirty,
		abandoned: st.Abandoned,
		unclean:   st.Unclean,
		prevPGID:  st.PGID,
		lastErr:   st.LastError,
		rerunOK:   endedOK(st),
		childLog:  st.ChildLog,
		retry:     plan.NextRetry,
		// recovered counts the recoveries of cut-off attempts in a row.
		recovered: st.DirtyRecoveries,
	}
	if st.Attempts > 0 && !st.Remote {
		// What a local attempt left running is ended before the next;
		// a remote one's is on its worker.
		n.prevToken = executor.AttemptToken(r.absLog, plan.ID, st.RetryCount)
	}
	switch plan.Action {
	case ActionKeep:
		n.final = st.Status
		n.outDigest = st.OutputDigest
		n.output = st.Output
		n.outputKept = true
	case ActionLeave:
		n.blocked, n.left = true, true // not started, not counted as blocked
	}
	return n
}

// nodeDone is a step goroutine's report to the scheduler.
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

// scheduler runs one invocation's DAG: independent steps in parallel up to
// the limit, a step once every dependency is satisfied, until nothing more
// can run. Its loop is the only goroutine that touches the nodes, except a
// node's own step goroutine while it runs.
type scheduler struct {
	r      *taskRun
	ctx    context.Context
	cancel context.CancelCauseFunc

	ready    readyQueue
	res      *resourcePool // named resources: steps wait here for theirs
	done     chan nodeDone // step goroutines' ends
	retryDue chan *node    // steps whose retry delay has passed

	running        int  // step goroutines out
	waitingRetries int  // retry delays armed
	stopping       bool // interrupted, or the log failed: nothing new starts
	// phase counts the handler lists started (on_failure, then finally),
	// once every step of steps: has settled.
	phase int
	// endsUnsynced: a STEP_END (durability always) waits for the
	// scheduler's fsync.
	endsUnsynced bool
	logErr       error // the log could not be written: the run stops
}

// runFailed is the cause with which the scheduler stops the steps still
// running when the log could not be written: the run stops on a failure,
// not on an interruption (a hub's attempts are left to the next run).
type runFailed struct{ err error }

func (f *runFailed) Error() string { return "the run stops: " + f.err.Error() }
func (f *runFailed) Unwrap() error { return f.err }

// runSteps runs the DAG through the scheduler and writes the summary.
func (r *taskRun) runSteps(parent context.Context) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	s := &scheduler{r: r, ctx: ctx, cancel: cancel, done: make(chan nodeDone), retryDue: make(chan *node),
		res: newResourcePool(r.t.p.Resources)}
	kept := 0
	for _, n := range r.nodes {
		if n.final != "" {
			kept++
		}
	}
	r.rep = progress.New(r.e.opts.Progress, r.e.opts.Stdout, r.e.opts.Color, r.e.opts.Clock)
	r.rep.Begin(r.t.id, r.logPath, len(r.nodes), kept, resumeNews(r.nodes))

	s.settleUnrun()
	s.stopping = s.logErr != nil
	s.markReady()
	s.loop()

	r.dropWarm()
	r.quiesce() // a hub's events: none is recorded after the summary
	if s.logErr != nil {
		r.rep.Finish("")
		return s.logErr
	}
	return r.summarize(parent.Err() != nil)
}

// settleUnrun ends the steps that this invocation settles without running
// them: those resume_from leaves out, and those in a crash loop.
func (s *scheduler) settleUnrun() {
	r := s.r
	for _, i := range r.t.p.TopoOrder() {
		n := r.nodes[i]
		var err error
		switch n.plan.Action {
		case ActionKeep:
			if n.abandoned {
				err = r.endAbandoned(n)
			}
		case ActionSkip:
			if n.dirty {
				r.endPrevious(n)
			}
			err = r.endWithoutRunning(n, eventlog.Skipped, "skipped: "+n.plan.Reason)
		case ActionCrashLoop:
			if n.dirty {
				r.endPrevious(n)
			}
			msg := fmt.Sprintf("crash loop: attempt cut off by a crash in each of the last %d runs, so it is not run again; "+
				"fix the cause, then run `apollo run %s --resume-from %s` to run it again",
				r.t.p.MaxDirtyRestarts, r.t.p.Path, n.id())
			err = r.endWithoutRunning(n, eventlog.Failed, msg)
		}
		if err != nil {
			s.logErr = err
			return
		}
	}
}

// endAbandoned ends what the cut-off attempt of n, a step skipped since by
// an intervention, left running, and says so in the log when it found any:
// a skip means "do not run it again", not "let its last attempt go on".
func (r *taskRun) endAbandoned(n *node) error {
	ended := r.endPrevious(n)
	if ended == 0 {
		return nil
	}
	return r.w.AppendDurable(&eventlog.Record{EventType: eventlog.Warning, StepID: n.id(), Status: eventlog.Running,
		Message: fmt.Sprintf("ended %d process(es) left running by the cut-off attempt %d of this step, skipped since",
			ended, max(n.retry-1, 0))})
}

// markReady counts each step's unsatisfied dependencies, blocks what
// failed steps block, and queues (or delays) the steps ready now.
func (s *scheduler) markReady() {
	r := s.r
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
		if n.final == "" && !n.blocked && n.waiting == 0 && n.rs.step.Handler == "" {
			if wait := time.Duration(n.plan.WaitMS) * time.Millisecond; wait > 0 {
				s.after(wait, n)
			} else {
				heap.Push(&s.ready, n)
			}
		}
	}
}

// loop starts ready steps and takes their ends until nothing runs and
// nothing more can start.
func (s *scheduler) loop() {
	for {
		if s.ctx.Err() != nil {
			s.stopping = true // interrupted: nothing new starts
		}
		if s.r.snap.due() {
			s.r.snap.write()
		}
		if s.startReady() {
			continue // a step ran on this goroutine: look again
		}
		if s.running == 0 && (s.stopping || (s.ready.Len() == 0 && s.waitingRetries == 0)) {
			if !s.stopping && s.nextPhase() {
				continue // the handlers of the next list run
			}
			return // the summary, or closing the log, makes every record durable
		}
		if s.endsUnsynced {
			// Nothing was started to carry the STEP_END to disk: start its
			// fsync now, without waiting for it.
			s.r.w.SyncSoon()
			s.endsUnsynced = false
		}
		s.wait()
	}
}

// startReady starts ready steps up to the parallelism. It reports true
// when it ran one on this goroutine instead: nothing else ran and nothing
// could become ready before it ended (a chain, or the last step), and
// handing its end back from another goroutine would wake this one, once a
// step.
func (s *scheduler) startReady() (ranHere bool) {
	r := s.r
	for !s.stopping && s.running < r.t.parallel && s.ready.Len() > 0 {
		n := heap.Pop(&s.ready).(*node)
		if n.blocked || n.final != "" {
			continue
		}
		if len(n.rs.step.Resources) > 0 && !s.res.acquire(n) {
			continue // ready again once a step gives back what it waits for
		}
		n.started = true
		// Every step started appends a durable record (its STEP_START or
		// CLEANUP), whose fsync covers the STEP_ENDs before it.
		s.endsUnsynced = false
		if s.running == 0 && s.ready.Len() == 0 && s.waitingRetries == 0 {
			if r.warmUp(n) {
				// Let the goroutine starting the next shell run now (this
				// one is picked up by the other processor), not once this
				// one blocks: a shell started late is waited for.
				runtime.Gosched()
			}
			s.ended(r.work(s.ctx, n))
			return true
		}
		s.running++
		go func() { s.done <- r.work(s.ctx, n) }()
		r.warmUp(n)
	}
	return false
}

// wait takes the next event: a step's end, a retry due, or the run's end.
func (s *scheduler) wait() {
	select {
	case d := <-s.done:
		s.running--
		s.ended(d)
	case n := <-s.retryDue:
		s.waitingRetries--
		if !s.stopping {
			heap.Push(&s.ready, n)
		}
	case <-s.ctx.Done():
		s.stopping = true
		// Pending retries will not fire; stop counting them.
		s.waitingRetries = 0
		// Keep draining done until every step goroutine is back.
		if s.running == 0 {
			return
		}
		d := <-s.done
		s.running--
		if d.logErr != nil && s.logErr == nil {
			s.logErr = d.logErr
		}
		if d.status != eventlog.Running {
			d.n.settle(d)
		}
	}
}

// ended takes the end of a step's attempt.
func (s *scheduler) ended(d nodeDone) {
	s.endsUnsynced = s.endsUnsynced || d.unsynced
	s.res.release(d.n, &s.ready)
	if d.logErr != nil {
		if s.logErr == nil {
			s.logErr = d.logErr
			s.stopping = true
			s.cancel(&runFailed{d.logErr})
		}
		return
	}
	if d.status == eventlog.Running { // a retry is due
		if !s.stopping {
			s.after(d.delay, d.n)
		}
		return
	}
	d.n.settle(d)
	if d.status == eventlog.Success && d.n.rs.step.Foreach != nil {
		s.expanded(d.n, d.n.output, false) // before release: dependents wait for the instances
	}
	s.release(d.n)
}

// release makes ready the children that n's end satisfies (warming the
// shell of a join that now waits for one step), and blocks n's
// descendants when n failed and is required.
func (s *scheduler) release(n *node) {
	for _, c := range n.children {
		if n.satisfies() {
			if c.waiting--; c.waiting == 0 && !c.blocked && c.final == "" {
				heap.Push(&s.ready, c)
			} else if c.waiting == 1 {
				s.r.warmJoin(c)
			}
		}
	}
	if n.final == eventlog.Failed && !n.rs.step.Optional {
		s.r.block(n)
	}
}

// nextPhase starts the next handler list once everything before it has
// settled: on_failure when a required step failed (else its handlers are
// skipped), then finally. It reports whether it made any handler ready.
func (s *scheduler) nextPhase() bool {
	r := s.r
	for s.phase < 2 {
		s.phase++
		list := pipeline.HandlerOnFailure
		if s.phase == 2 {
			list = pipeline.HandlerFinally
		}
		if list == pipeline.HandlerOnFailure {
			r.failed = r.failedSteps()
			if len(r.failed) == 0 {
				s.skipHandlers(list, "on_failure: the task did not fail")
				continue
			}
		}
		pushed := false
		for _, n := range r.nodes {
			if n.rs.step.Handler == list && n.final == "" && !n.blocked && n.waiting == 0 {
				heap.Push(&s.ready, n)
				pushed = true
			}
		}
		if pushed {
			return true
		}
	}
	return false
}

// skipHandlers ends the handlers of list that have not run as SKIPPED.
func (s *scheduler) skipHandlers(list, why string) {
	for _, n := range s.r.nodes {
		if n.rs.step.Handler == list && n.final == "" && !n.left {
			if err := s.r.endWithoutRunning(n, eventlog.Skipped, why); err != nil && s.logErr == nil {
				s.logErr, s.stopping = err, true
				return
			}
		}
	}
}

// after makes n ready again once d has passed, unless the run ends first.
func (s *scheduler) after(d time.Duration, n *node) {
	s.waitingRetries++
	ctx, due := s.ctx, s.retryDue
	waited := s.r.retryWaitSpan(n, d)
	t := s.r.e.opts.Clock.AfterFunc(d, func() {
		waited()
		select {
		case due <- n:
		case <-ctx.Done():
		}
	})
	context.AfterFunc(ctx, func() { t.Stop(); waited() })
}

// appendFor appends a step's record with the step's durability: always
// waits for the fsync; batch lets it share a later one. Either way the
// STEP_START of a dependent, which is always durable, comes after it in the
// file, so a STEP_END is on disk before any step that depends on it starts.
func (r *taskRun) appendFor(s *pipeline.Step, rec *eventlog.Record) error {
	if s.Durability == pipeline.DurabilityBatch {
		return r.w.Append(rec)
	}
	return r.w.AppendDurable(rec)
}

// makeDirs creates the folders an attempt writes to, once per run each.
// They are not fsynced: what a body writes into them is not either, so a
// power loss may take a folder with its files, and the next run makes it
// again; fsyncing each parent put two journal commits before a run's
// first step.
func (r *taskRun) makeDirs(dirs ...string) error {
	r.dirsMu.Lock()
	defer r.dirsMu.Unlock()
	for _, dir := range dirs {
		if _, ok := r.dirsMade[dir]; ok {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
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
func (r *taskRun) block(n *node) {
	for _, c := range n.children {
		if !c.blocked && c.final == "" {
			c.blocked = true
			r.dropWarmOf(c)
			r.block(c)
		}
	}
}

// retryDelay is the wait before retry number k (k ≥ 1) of a step (docs/spec.md §2):
// fixed is the base delay; exponential doubles it each time, capped by
// max_retry_delay_seconds, and never overflows.
func retryDelay(p *pipeline.Pipeline, s *pipeline.Step, k int) time.Duration {
	base := p.RetryDelay
	if s.RetryPolicy != pipeline.RetryExponential || k <= 1 {
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
