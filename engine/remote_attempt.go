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

// remoteWork is work for a run with a hub (docs/spec.md §8): the same
// cleanup before a rerun, then one attempt dispatched instead of executed —
// a durable DISPATCH record, then one message — whose start and end the
// ingest goroutine records as the hub reports them. A lost attempt is
// dirty: its cleanup runs and the next attempt is dispatched, counted by
// max_dirty_restarts. It returns the same nodeDone as work.
func (r *run) remoteWork(ctx context.Context, n *node) nodeDone {
	h := r.hub
	h.mu.Lock()
	sl := h.adopted[n.id()]
	delete(h.adopted, n.id())
	if sl != nil {
		sl.ctx = ctx
	}
	prevRemote := h.prevRemote[n.id()]
	h.mu.Unlock()
	for {
		if sl == nil {
			ended := 0
			if (n.dirty || n.unclean) && n.prevToken != "" && !prevRemote {
				// An attempt of an earlier local run.
				ended = executor.EndLeftovers(n.prevToken, n.prevPGID, r.e.opts.KillGrace)
			}
			if n.dirty || (n.unclean && n.rs.step.HasCleanup()) || ended > 0 {
				if d, ok := r.cleanup(ctx, n, ended); !ok {
					return d
				}
				h.mu.Lock()
				h.recov[n.id()]++ // a CLEANUP with dirty: true was recorded, or none was needed
				h.mu.Unlock()
			}
			var d *nodeDone
			if sl, d = r.dispatch(ctx, n); d != nil {
				return *d
			}
		}
		o, d := r.awaitOutcome(ctx, n, sl)
		if d != nil {
			return *d
		}
		h.mu.Lock()
		h.prevRemote[n.id()] = true
		h.mu.Unlock()
		if !o.lost {
			return r.tookEnd(n, sl, o)
		}
		// Lost: cut off, as by a crash.
		sl, prevRemote = nil, true
		n.dirty, n.unclean, n.prevToken = true, true, ""
		h.mu.Lock()
		recovered := h.recov[n.id()]
		h.mu.Unlock()
		if recovered >= r.t.p.MaxDirtyRestarts {
			msg := fmt.Sprintf("crash loop: the attempt's worker was lost %d time(s) in a row, so it is not run again; "+
				"fix the cause, then run `apollo run %s --hub ... --resume-from %s` to run it again",
				recovered+1, r.t.p.Path, n.id())
			if err := r.endWithoutRunning(n, eventlog.Failed, msg); err != nil {
				return nodeDone{n: n, logErr: err}
			}
			return nodeDone{n: n, status: eventlog.Failed, err: errors.New(msg)}
		}
		if ctx.Err() != nil {
			return nodeDone{n: n, status: eventlog.Running} // left for the next run
		}
	}
}

// dispatch records and publishes the step's next attempt.
func (r *run) dispatch(ctx context.Context, n *node) (*slot, *nodeDone) {
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
func (r *run) awaitOutcome(ctx context.Context, n *node, sl *slot) (outcome, *nodeDone) {
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
	if r.ro.Hub.detach {
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
		r.rep.event(n.id(), fmt.Sprintf("attempt %d still running on its worker; the next run adopts it", sl.n))
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
	cctx, cancel := context.WithTimeout(ctx, h.c.Config().CallTimeout)
	_, err := h.c.JS.Consumer(cctx, remote.StepsStream, remote.PoolConsumer(pool))
	cancel()
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		why = fmt.Sprintf("no worker of pool %s has ever pulled from this hub: start one (apollo worker --hub ... --pool %s)", pool, pool)
	}
	msg := fmt.Sprintf("attempt %d was dispatched to pool %s %s ago and no worker has taken it yet: %s",
		sl.n, pool, textfmt.Duration(time.Since(since)), why)
	if h.r.rep != nil {
		h.r.rep.event(n.id(), msg)
	}
	if said {
		return nil
	}
	return h.r.w.AppendUnsynced(&eventlog.Record{EventType: eventlog.Warning, StepID: n.id(), Status: eventlog.Running,
		RetryCount: sl.n, Message: msg})
}

// tookEnd brings the node up to date with its attempt's recorded end, as
// recordEnd does for a local one.
func (r *run) tookEnd(n *node, sl *slot, o outcome) nodeDone {
	d := nodeDone{n: n, attempt: sl.n, status: o.status, delay: o.delay, err: o.err,
		unsynced: n.rs.step.Durability != pipeline.DurabilityBatch}
	n.prevToken = ""
	switch o.status {
	case eventlog.Success:
		n.outDigest, n.output = o.res.OutputDigest, o.res.Output
	case eventlog.Running:
		n.unclean = true
		d.err = nil
	default:
		n.unclean = true
	}
	return d
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
	if len(res.Output) > MaxOutputRecord && res.Err == nil {
		res.Err = fmt.Errorf("the step's output is %d bytes; the log keeps at most %d (1 MiB) of a step's output: "+
			"write large data to a file (under {{artifacts_dir}}) and output its path", len(res.Output), MaxOutputRecord)
		res.Output = nil
	}
	rec := &eventlog.Record{EventType: eventlog.StepEnd, StepID: ev.Step, RetryCount: ev.Attempt,
		InputDigest: h.inputOf(ev.Step), OutputDigest: res.OutputDigest, DurationMS: ev.DurationMS,
		TimedOut: res.TimedOut, Interrupted: res.Interrupted, Message: res.Note, Worker: ev.Worker, SrcSeq: seq}
	if res.ExitCode != 0 {
		code := res.ExitCode
		rec.ExitCode = &code
	}
	o := outcome{res: res}
	h.mu.Lock()
	n, ctx := sl.node, sl.ctx
	h.mu.Unlock()
	switch {
	case res.Err == nil:
		rec.Status, rec.Output = eventlog.Success, res.Output
	case n != nil && ctx != nil && r.mayRetry(ctx, n, res):
		o.delay = retryDelay(r.t.p, n.rs.step, n.attempts)
		rec.Status, rec.ErrorMessage, rec.NextDelayMS = eventlog.Running, res.Err.Error(), o.delay.Milliseconds()
	default:
		rec.Status, rec.ErrorMessage = eventlog.Failed, res.Err.Error()
		o.err = res.Err
	}
	o.status = rec.Status
	rec.ErrorMessage = bounded(rec.ErrorMessage)
	rec.Message = bounded(rec.Message)
	if err := r.w.AppendUnsynced(rec); err != nil {
		return err
	}
	if r.rep != nil {
		shown := rec.Status
		if shown == eventlog.Running {
			shown = "RETRY"
		}
		r.rep.ended(ev.Step, shown, ev.Attempt, time.Duration(ev.DurationMS)*time.Millisecond, rec.ErrorMessage, o.delay)
	}
	h.close(sl, o)
	return nil
}

// workFor is the message of attempt retry of n: what newAttempt gives a
// local executor, less this host's own paths.
func (r *run) workFor(n *node, rs *renderedStep, retry int, input, pool string) *remote.Work {
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
		KillGrace: r.e.opts.KillGrace, Markers: marks, Sources: rs.sources}
}

// outputWriter writes remote attempts' output into the coordinator's
// output files, each piece at its offset, so that a piece read twice (a
// coordinator restarted) writes the same bytes again.
type outputWriter struct {
	r       *run
	mu      sync.Mutex
	cond    *sync.Cond
	written map[string]int64 // step#attempt → bytes written
}

func newOutputWriter(r *run) *outputWriter {
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
