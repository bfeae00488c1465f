package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/engine/remote"
	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// hubDispatch carries an attempt to a worker through the hub (docs/spec.md
// §8): its beginning is a durable DISPATCH record, then one message; the
// worker's start and end are recorded by the ingest goroutine as the hub
// reports them, in stream order, through the same stepEnd as a local
// attempt's. An attempt in flight when the run started (adopted) is waited
// for, not dispatched again. A lost attempt is cut off, as by a crash: the
// lifecycle cleans up and dispatches the next, counted by
// max_dirty_restarts (afterLoss).
type hubDispatch struct{ r *taskRun }

func (c hubDispatch) begin(ctx context.Context, at *attemptRun) error {
	r, n := c.r, at.n
	h := r.hub
	h.mu.Lock()
	sl := h.adopted[n.id()]
	delete(h.adopted, n.id())
	if sl != nil {
		sl.ctx = ctx
		if sl.since.IsZero() { // adopted: waited for from now on
			sl.pool, sl.since = h.poolOf(n), time.Now()
		}
	}
	h.mu.Unlock()
	if sl == nil {
		var d *nodeDone
		if sl, d = r.dispatch(ctx, n); d != nil {
			if d.logErr != nil {
				return d.logErr
			}
			at.done = d
			return nil
		}
	}
	at.hub, at.retry = sl, sl.n
	return nil
}

func (c hubDispatch) carry(ctx context.Context, at *attemptRun) (executor.Result, error) {
	r, n, sl := c.r, at.n, at.hub
	o, d := r.awaitOutcome(ctx, n, sl)
	switch {
	case d != nil && d.logErr != nil:
		return executor.Result{}, d.logErr
	case d != nil:
		at.done = d
	case o.lost:
		at.lost = true
		n.dirty, n.unclean, n.prevToken = true, true, ""
	default:
		at.trace = attemptTrace{exitCode: o.res.ExitCode, worker: o.worker}
		if o.res.Err != nil {
			at.trace.err = o.res.Err.Error()
		}
		n.prevToken = "" // what it left running is on its worker
		end := r.settleEnd(n, sl.n, o)
		end.unsynced = n.rs.step.Durability != pipeline.DurabilityBatch
		at.done = &end
	}
	return executor.Result{}, nil
}

// afterLoss decides what follows a lost attempt: the step fails as a crash
// loop once its attempts were lost or cut off max_dirty_restarts times in a
// row, an interrupted run leaves it for the next, or stop is false and
// work tries again.
func (r *taskRun) afterLoss(ctx context.Context, n *node) (d nodeDone, stop bool) {
	if n.recovered >= r.t.p.MaxDirtyRestarts {
		msg := fmt.Sprintf("crash loop: the attempt's worker was lost %d time(s) in a row, so it is not run again; "+
			"fix the cause, then run `apollo run %s --hub ... --resume-from %s` to run it again",
			n.recovered+1, r.t.p.Path, n.id())
		if err := r.endWithoutRunning(n, eventlog.Failed, msg); err != nil {
			return nodeDone{n: n, logErr: err}, true
		}
		return nodeDone{n: n, status: eventlog.Failed, err: errors.New(msg)}, true
	}
	if ctx.Err() != nil {
		return nodeDone{n: n, status: eventlog.Running}, true // left for the next run
	}
	return nodeDone{}, false
}

// dispatch records and publishes the step's next attempt.
func (r *taskRun) dispatch(ctx context.Context, n *node) (*slot, *nodeDone) {
	h := r.hub
	retry := n.retry
	n.retry++
	n.attempts++
	rs, err := r.late(n)
	if err != nil {
		msg := err.Error()
		if err := r.endWithoutRunning(n, eventlog.Failed, msg); err != nil {
			return nil, &nodeDone{n: n, logErr: err}
		}
		return nil, &nodeDone{n: n, status: eventlog.Failed, err: err}
	}
	input := inputDigest(rs, r.upstreamDigests(n), "")
	pool := h.poolOf(n)
	sl := &slot{n: retry, open: true, input: input, pool: pool, since: time.Now(), node: n, ctx: ctx, done: make(chan outcome, 1)}
	// The slot exists before the DISPATCH: from then on the attempt's
	// events may come.
	h.mu.Lock()
	h.slots[n.id()] = sl
	h.mu.Unlock()
	rec := &eventlog.Record{EventType: eventlog.Dispatch, StepID: n.id(), Status: eventlog.Running,
		RetryCount: retry, InputDigest: input, Pool: pool}
	if err := r.w.AppendDurable(rec); err != nil {
		return nil, &nodeDone{n: n, logErr: err}
	}
	if err := r.makeDirs(r.t.dir.Artifacts(r.t.id)); err != nil {
		return nil, &nodeDone{n: n, logErr: err}
	}
	w := r.workFor(n, rs, retry, input, pool)
	if _, err := h.c.Dispatch(context.WithoutCancel(ctx), w); err != nil {
		// DISPATCH is durable: the next run publishes it (adoption).
		return nil, &nodeDone{n: n, logErr: &HubError{TaskID: r.t.id, Err: err}}
	}
	return sl, nil
}

// awaitOutcome waits for the end or the loss of the slot's attempt. An
// interrupted run asks the workers to end the task's attempts and waits a
// while for their ends; a hub that failed stops the run.
func (r *taskRun) awaitOutcome(ctx context.Context, n *node, sl *slot) (outcome, *nodeDone) {
	h := r.hub
	every := r.ro.Hub.Untaken
	if every <= 0 {
		every = DefaultUntaken
	}
	untaken := time.NewTicker(every)
	defer untaken.Stop()
wait:
	for {
		select {
		case o := <-sl.done:
			return o, nil
		case <-h.failed:
			return outcome{}, &nodeDone{n: n, logErr: h.failErr}
		case <-ctx.Done():
			break wait
		case <-untaken.C:
			if err := h.sayUntaken(ctx, n, sl); err != nil {
				return outcome{}, &nodeDone{n: n, logErr: err}
			}
		}
	}
	if r.ro.Hub.detach || !h.mayCancel(ctx) {
		return outcome{}, &nodeDone{n: n, status: eventlog.Running}
	}
	h.cancelRemote()
	t := time.NewTimer(r.e.opts.KillGrace + 2*h.c.Config().CallTimeout + time.Second)
	defer t.Stop()
	select {
	case o := <-sl.done:
		return o, nil
	case <-h.failed:
		return outcome{}, &nodeDone{n: n, logErr: h.failErr}
	case <-t.C:
		r.rep.Event(n.id(), fmt.Sprintf("attempt %d still running on its worker; the next run adopts it", sl.n))
		return outcome{}, &nodeDone{n: n, status: eventlog.Running}
	}
}

// sayUntaken says, on the board and once in the log, that no worker has
// taken the slot's attempt since it was dispatched, instead of waiting mute:
// the pool may have no worker, or none with a free slot.
func (h *hubRun) sayUntaken(ctx context.Context, n *node, sl *slot) error {
	h.mu.Lock()
	started, pool, since, said := sl.started, sl.pool, sl.since, sl.saidUntaken
	sl.saidUntaken = true
	h.mu.Unlock()
	if started || !sl.open {
		return nil
	}
	why := fmt.Sprintf("is a worker of pool %s running, with a free slot? (apollo worker --hub ... --pool %s)", pool, pool)
	consumer := remote.PoolConsumer(pool)
	if c := n.rs.step.Container; c != nil {
		// Only a worker with an engine takes a container step.
		why = fmt.Sprintf("the step runs in a container (image: %s), which only a worker started with --container-engine takes: "+
			"is one of pool %s running, with a free slot? (apollo worker --hub ... --pool %s --container-engine podman)", c.Image, pool, pool)
		consumer = remote.ContainerPoolConsumer(pool)
	}
	cctx, cancel := context.WithTimeout(ctx, h.c.Config().CallTimeout)
	_, err := h.c.JS.Consumer(cctx, remote.StepsStream, consumer)
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound) && consumer != remote.PoolConsumer(pool):
		why = fmt.Sprintf("the step runs in a container (image: %s) and no worker of pool %s started with --container-engine has ever "+
			"pulled from this hub: the step needs a worker with --container-engine; start one (apollo worker --hub ... --pool %s "+
			"--container-engine podman)", n.rs.step.Container.Image, pool, pool)
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		why = fmt.Sprintf("no worker of pool %s has ever pulled from this hub: start one (apollo worker --hub ... --pool %s)", pool, pool)
	}
	msg := fmt.Sprintf("attempt %d was dispatched to pool %s %s ago and no worker has taken it yet: %s",
		sl.n, pool, textfmt.Duration(time.Since(since)), why)
	if h.r.rep != nil {
		h.r.rep.Event(n.id(), msg)
	}
	if said {
		return nil
	}
	return h.r.w.AppendUnsynced(&eventlog.Record{EventType: eventlog.Warning, StepID: n.id(), Status: eventlog.Running,
		RetryCount: sl.n, Message: msg})
}

// end records the end of a step's open attempt: at most one STEP_END per
// attempt, with the retry decision local mode makes.
func (h *hubRun) end(ev *remote.Event, seq int64, sl *slot) error {
	r := h.r
	res := executor.Result{ExitCode: ev.ExitCode, OutputDigest: ev.OutputDigest, Output: ev.Output,
		TimedOut: ev.TimedOut, Interrupted: ev.Interrupted, NotStarted: ev.NotStarted, Note: ev.Note}
	if ev.Error != "" {
		res.Err = errors.New(ev.Error)
	}
	h.mu.Lock()
	n, ctx := sl.node, sl.ctx
	h.mu.Unlock()
	rec, o := r.stepEnd(ctx, n, ev.Step, ev.Attempt, h.inputOf(ev.Step), res, false)
	rec.DurationMS, rec.Worker, rec.SrcSeq = ev.DurationMS, ev.Worker, seq
	o.worker = ev.Worker
	if err := r.w.AppendUnsynced(rec); err != nil {
		return err
	}
	if h.log != nil && h.log.OneByOne() {
		// One replica appends the next DISPATCH after this record, not in
		// one batch with it: publishing it now overlaps its write with
		// the scheduling of what follows.
		r.w.PublishSoon()
	}
	if n != nil {
		r.noteStepEnd(n.rs.step, rec)
	}
	if r.rep != nil {
		r.rep.Ended(ev.Step, shownStatus(rec.Status), ev.Attempt, time.Duration(ev.DurationMS)*time.Millisecond, rec.ErrorMessage, o.delay)
	}
	h.close(sl, o)
	return nil
}

// workFor is the message of attempt retry of n: what newAttempt gives a
// local executor, less this host's own paths.
func (r *taskRun) workFor(n *node, rs *renderedStep, retry int, input, pool string) *remote.Work {
	s := rs.step
	t := r.t
	p := *t.p
	p.Source, p.Steps = nil, []*pipeline.Step{s}
	env := appendItemEnv(t.appendStepEnv(make([]string, 0, len(rs.env)+len(s.Item)+5), rs, retry), s)
	vars := make(map[string]string, len(t.vars)+1)
	for k, v := range t.vars {
		vars[k] = v
	}
	vars["step_id"] = s.ID
	host, _ := os.Hostname()
	var marks []remote.Marker
	for _, m := range r.markers.All() {
		marks = append(marks, remote.Marker{Name: m.Name, State: m.State, Result: m.Result})
	}
	return &remote.Work{Task: t.id, Step: s.ID, Attempt: retry, Pool: pool, Run: r.hub.run, Secret: r.hub.secret(s.ID, retry),
		Epoch:       r.hub.lease.Epoch(),
		Coordinator: host + ":" + strconv.Itoa(os.Getpid()), Pipeline: &p, Command: rs.command, Env: env,
		Vars: vars, Params: rs.with, Upstream: r.upstreamOutputs(n), InputDigest: input,
		ArtifactsDir: t.dir.Artifacts(t.id), StateDir: t.dir.Root, OutputLimit: max(r.e.opts.MaxOutputBytes, 0),
		KillGrace: r.e.opts.KillGrace, Markers: marks, Sources: rs.sources,
		Traceparent: r.traceparent(spanAttempt, s.ID, retry)}
}

// outputWriter writes remote attempts' output into the coordinator's
// output files, each piece at its offset, so that a piece read twice (a
// coordinator restarted) writes the same bytes again.
type outputWriter struct {
	r       *taskRun
	mu      sync.Mutex
	cond    *sync.Cond
	written map[string]int64 // step#attempt → bytes written
}

func newOutputWriter(r *taskRun) *outputWriter {
	o := &outputWriter{r: r, written: map[string]int64{}}
	o.cond = sync.NewCond(&o.mu)
	return o
}

func (o *outputWriter) run(ctx context.Context, c *remote.Client, h *hubRun) {
	feed, err := c.NewFeed(ctx, remote.OutputStream, remote.TaskOutput(o.r.t.id), 1)
	if err != nil {
		return
	}
	defer feed.Close()
	for {
		m, err := feed.Next(ctx)
		if err != nil {
			if ctx.Err() == nil {
				h.fail(err)
			}
			return
		}
		var piece remote.Output
		if json.Unmarshal(m.Data, &piece) != nil || piece.Run != h.run || o.r.t.p.Step(piece.Step) == nil ||
			piece.Task != o.r.t.id || !remote.SameSecret(piece.Secret, h.secret(piece.Step, piece.Attempt)) {
			continue // another run's, or not from the attempt's worker
		}
		o.write(&piece)
	}
}

func (o *outputWriter) write(p *remote.Output) {
	t := o.r.t
	path := t.dir.Output(t.id, p.Step, p.Attempt)
	if err := o.r.makeDirs(strings.TrimSuffix(path, "/"+p.Step+"."+strconv.Itoa(p.Attempt)+".log")); err == nil {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o644); err == nil {
			_, _ = f.WriteAt(p.Data, p.Offset)
			f.Close()
		}
	}
	key := p.Step + "#" + strconv.Itoa(p.Attempt)
	o.mu.Lock()
	o.written[key] = max(o.written[key], p.Offset+int64(len(p.Data)))
	o.cond.Broadcast()
	o.mu.Unlock()
}

// wait waits, a little, until an attempt's output up to size is written:
// a STEP_END then follows the output it reports.
func (o *outputWriter) wait(step string, attempt int, size int64) {
	if size <= 0 {
		return
	}
	key := step + "#" + strconv.Itoa(attempt)
	deadline := time.Now().Add(2 * time.Second)
	timer := time.AfterFunc(2*time.Second, func() { o.mu.Lock(); o.cond.Broadcast(); o.mu.Unlock() })
	defer timer.Stop()
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.written[key] < size && time.Now().Before(deadline) {
		o.cond.Wait()
	}
}
