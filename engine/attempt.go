package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"apollo/engine/cache"
	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/engine/trace"
	"apollo/eventlog"

	"go.opentelemetry.io/otel/attribute"
)

// An attempt's lifecycle is written once, here, for every kind of step:
//
//  1. cleanup of what the previous attempt left: the processes it left
//     running are ended and its cleanup hook runs (a CLEANUP record), before
//     any rerun (recoverPrevious);
//  2. a beginning made durable before the body can run: a STEP_START, or for
//     a hub a DISPATCH (the carrier's begin);
//  3. the body (the carrier's carry);
//  4. one STEP_END (recordEnd, or for a hub the ingest goroutine through
//     the same stepEnd);
//  5. the retry decision (stepEnd): the step's end, or a retry after a delay.
//
// What carries the body is a carrier (carrier.go); the crash-point tests
// drive this lifecycle through every one.

// work runs one step: its condition, then attempts through its carrier,
// each after the cleanup of what the previous one left.
func (r *taskRun) work(ctx context.Context, n *node) nodeDone {
	s := n.rs.step
	if s.When != "" && n.attempts == 0 {
		if run, d := r.decideWhen(ctx, n); !run {
			if n.dirty || n.unclean {
				r.endPrevious(n)
			}
			return d
		}
	}
	c := r.carrierFor(n)
	for {
		if d, ok := r.recoverPrevious(ctx, n, c); !ok {
			return d
		}
		d, lost := r.attempt(ctx, n, c)
		if !lost {
			return d
		}
		if d, stop := r.afterLoss(ctx, n); stop {
			return d
		}
	}
}

// endPrevious ends every process n's previous attempt on this host left
// running (found by its attempt tag, and its process group), and returns
// how many; none when that attempt ran elsewhere (a worker's).
func (r *taskRun) endPrevious(n *node) int {
	if n.prevToken == "" {
		return 0
	}
	return executor.EndLeftovers(n.prevToken, n.prevPGID, r.e.opts.KillGrace)
}

// recoverPrevious ends what n's previous attempt left running (cut off by
// a crash, or failed) — what its carrier c knows of first, then every
// process — and cleans up after it. It returns ok=false with the step's
// end when the step must not run again.
func (r *taskRun) recoverPrevious(ctx context.Context, n *node, c carrier) (nodeDone, bool) {
	ended, removed := 0, ""
	if (n.dirty || n.unclean) && n.prevToken != "" {
		if l, ok := c.(leftovers); ok {
			removed = l.endLeftovers(n)
		}
		// A process that left the attempt's process group (setsid, a
		// daemon) is found by its APOLLO_ATTEMPT tag: an old attempt's
		// processes never run beside its cleanup or its rerun.
		ended = r.endPrevious(n)
	}
	if n.dirty && n.retry > 0 {
		// What the cut-off attempt wrote to $APOLLO_OUTPUT was never
		// read, and may hold a secret in clear.
		os.Remove(r.t.publishPath(n.id(), n.retry-1))
	}
	if !n.dirty && !(n.unclean && n.rs.step.HasCleanup()) && ended == 0 && removed == "" {
		if n.attempts == 0 && (n.plan.Action == ActionRerun || n.plan.Action == ActionCleanRerun) {
			r.rep.Event(n.id(), "rerun: "+n.plan.Reason)
		}
		return nodeDone{}, true
	}
	d, ok := r.cleanup(ctx, n, ended, removed)
	if ok {
		n.recovered++ // a CLEANUP was recorded, or none was needed
	}
	return d, ok
}

// cleanup runs before a rerun, after ended leftover processes of the
// previous attempt were ended, and what its carrier removed (removed names
// it, "" when nothing was left). It returns ok=false with the step's end when
// the step must not run.
func (r *taskRun) cleanup(ctx context.Context, n *node, ended int, removed string) (nodeDone, bool) {
	s := n.rs.step
	var notes []string
	which := "the failed attempt"
	if n.dirty {
		which = "the cut-off attempt"
	}
	if ended > 0 {
		notes = append(notes, fmt.Sprintf("ended %d process(es) left running by %s", ended, which))
	}
	if removed != "" {
		notes = append(notes, fmt.Sprintf("removed %s left by %s", removed, which))
	}
	rec := &eventlog.Record{EventType: eventlog.Cleanup, StepID: s.ID, Status: eventlog.Pending,
		RetryCount: max(n.retry-1, 0), Dirty: n.dirty}
	began := r.e.opts.Clock.Now()
	ctx, sp := r.startStepSpan(ctx, spanCleanup, n, rec.RetryCount, began, attribute.Bool(trace.AttrDirty, n.dirty))
	defer func() {
		code := 0
		if rec.ExitCode != nil {
			code = *rec.ExitCode
		}
		r.endStepSpan(sp, rec.Status, code, rec.ErrorMessage)
	}()
	if s.HasCleanup() {
		// The failed attempt's STEP_END is on disk before its cleanup runs
		// (a no-op unless its fsync is still under way).
		if err := r.w.Sync(); err != nil {
			return nodeDone{n: n, logErr: err}, false
		}
		r.rep.Event(s.ID, "cleanup before rerun")
		r.e.crash("cleanup:before")
		res := r.runCleanup(ctx, n)
		r.e.crash("cleanup:after")
		rec.DurationMS = r.e.opts.Clock.Now().Sub(began).Milliseconds()
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
	} else if n.dirty || ended > 0 || removed != "" {
		notes = append(notes, "no cleanup hook")
	}
	if n.dirty {
		notes = append([]string{fmt.Sprintf("attempt %d was cut off by a crash", rec.RetryCount)}, notes...)
	}
	rec.Message = strings.Join(notes, "; ")
	rec.ErrorMessage = bounded(r.mask.String(rec.ErrorMessage))
	if err := r.appendFor(s, rec); err != nil {
		return nodeDone{n: n, logErr: err}, false
	}
	n.dirty, n.unclean = false, rec.Status == eventlog.Failed
	if rec.Status == eventlog.Failed {
		r.rep.Ended(s.ID, eventlog.Failed, rec.RetryCount, 0, rec.ErrorMessage, 0)
		return nodeDone{n: n, status: eventlog.Failed, err: errors.New(rec.ErrorMessage)}, false
	}
	if n.attempts == 0 { // what the resume found, said where it is dealt with
		why := rec.Message
		if why == "" {
			why = n.plan.Reason
		}
		r.rep.Event(s.ID, "rerun: "+why)
	}
	return nodeDone{}, true
}

// runCleanup runs the step's cleanup hook through its executor.
func (r *taskRun) runCleanup(ctx context.Context, n *node) executor.Result {
	s := n.rs.step
	retry := max(n.retry-1, 0)
	rs, err := r.late(n)
	if err != nil {
		return executor.Result{Err: err, ExitCode: -1}
	}
	a := r.newAttempt(n, rs, retry)
	a.Upstream = r.upstreamOutputs(n)
	a.OutputPath = strings.TrimSuffix(a.OutputPath, ".log") + ".cleanup.log"
	a.PublishPath = ""
	if tp := r.traceparent(spanCleanup, s.ID, retry); tp != "" {
		a.Env = setEnv(a.Env, traceparentEnv, tp)
	}
	a.Started = func(int) error { return nil }
	a.Cleanup = true
	var ex executor.Executor
	if s.CleanupCommand != "" {
		a.Command = rs.cleanupCommand
		ex = r.e.opts.Executors["shell"]
	} else {
		if ex, err = r.luaExecutor(s); err != nil {
			return executor.Result{Err: err, ExitCode: -1}
		}
	}
	actx, cancel := executor.WithTimeout(ctx, s.Timeout)
	defer cancel()
	return ex.Run(actx, a)
}

// attempt makes one attempt of n through c and records it: its beginning,
// durable before the body may run; the body; its STEP_END and what comes
// next. lost reports an attempt its carrier lost (a hub's worker went
// silent): it is cut off, as by a crash, and work recovers and tries again.
func (r *taskRun) attempt(ctx context.Context, n *node, c carrier) (d nodeDone, lost bool) {
	at := &attemptRun{n: n, retry: n.retry}
	began := r.spanNow()
	if err := c.begin(ctx, at); err != nil {
		at.close()
		return nodeDone{n: n, logErr: err}, false
	}
	ctx, sp := r.startStepSpan(ctx, spanAttempt, n, at.retry, began)
	defer func() { r.endAttemptSpan(sp, at, d, at.trace) }()
	var res executor.Result
	var err error
	if at.done == nil {
		if at.lateErr != nil {
			res, err = r.notStarted(at, at.lateErr)
		} else {
			res, err = c.carry(ctx, at)
		}
		if res.ExitCode != 0 {
			at.trace.exitCode = res.ExitCode
		}
		if res.Err != nil {
			at.trace.err = res.Err.Error()
		}
	}
	switch {
	case err != nil:
		return nodeDone{n: n, logErr: err}, false
	case at.lost:
		return nodeDone{}, true
	case at.done != nil:
		d = *at.done
	default:
		d = r.recordEnd(ctx, at, res)
	}
	if e, ok := c.(ender); ok {
		e.ended(at, d)
	}
	return d, false
}

// attemptRun is one attempt of a step while it is carried.
type attemptRun struct {
	n       *node
	retry   int
	input   string            // its input digest
	pre     *prepared         // n rendered with its upstream outputs, when its carrier has it already
	a       *executor.Attempt // what a local executor runs (and a child or an expansion reports to)
	ahead   executor.Ahead    // its shell, started ahead (warmUp), or nil
	imageID string            // its container's image, resolved by containerRun.begin
	began   time.Time         // when its body was released
	pgid    int               // its process group, once it runs
	// lateErr says why the step's upstream outputs could not be rendered
	// into it: the attempt fails without running.
	lateErr error
	// childLog is the log of a run: step's sub-pipeline task (childLog).
	childLog string
	// cachedFrom names the task whose result a cache hit took; its
	// STEP_END is then written with the step's durability (endDurable),
	// no STEP_START having come before it.
	cachedFrom string
	endDurable bool
	hit        *cache.Entry // the cache entry it takes its result from
	// done is the attempt's end when its carrier recorded it itself (a
	// hub's attempt, recorded by the ingest goroutine in stream order), or
	// settled it without a body; lost is set when the carrier lost it.
	done *nodeDone
	lost bool
	// hub is the hub carrier's slot of the attempt; cache the cache
	// carrier's probe.
	hub   *slot
	cache *cacheProbe
	// trace is what its span tells beyond its end.
	trace attemptTrace
}

// close ends the shell started ahead for the attempt, if it was not run.
func (at *attemptRun) close() {
	if at.ahead != nil {
		at.ahead.Close()
		at.ahead = nil
	}
}

// number makes at the step's next attempt.
func (n *node) number(at *attemptRun) {
	at.retry = n.retry
	n.retry++
	n.attempts++
}

// prepared is a step rendered with its upstream outputs, and its input
// digest (inputDigest): what an attempt, and a cached step's key, are made
// of.
type prepared struct {
	rs    *renderedStep
	input string
}

// prepareAttempt renders n with its upstream outputs and digests its input. The
// error says why the outputs could not be rendered into it.
func (r *taskRun) prepareAttempt(n *node) (prepared, error) {
	rs, err := r.late(n)
	return prepared{rs: rs, input: inputDigest(rs, r.upstreamDigests(n), secretsDigest(r.secrets))}, err
}

// appendStart numbers the attempt, appends its STEP_START (after decorate,
// if any, adds what its carrier records there) and prepares what an
// executor runs.
//
// Started waits for the record's fsync before the body may run, whatever
// the durability setting. For a shell body started here the fsync starts at
// once, so the disk works while the attempt is prepared and its process
// forked (held: forking blocks this thread). A Lua body, or a shell started
// ahead (warmUp), calls Started right away, which then does the fsync on
// this goroutine instead of waking one to do it. A crash in between leaves
// a dirty step whose body never ran; its rerun is preceded by cleanup, as
// for any dirty step.
func (r *taskRun) appendStart(at *attemptRun, decorate func(*eventlog.Record)) error {
	n := at.n
	s := n.rs.step
	n.number(at)
	pre := at.pre
	if pre == nil {
		p, err := r.prepareAttempt(n)
		pre, at.lateErr = &p, err
	}
	if n.refused != nil {
		at.lateErr = n.refused
	}
	at.input = pre.input
	at.ahead = r.takeWarm(n)
	start := &eventlog.Record{EventType: eventlog.StepStart, StepID: s.ID, Status: eventlog.Running,
		RetryCount: at.retry, InputDigest: at.input}
	if decorate != nil {
		decorate(start)
	}
	appendStart := r.w.AppendSyncing
	if s.Command == "" || at.ahead != nil {
		appendStart = r.w.AppendUnsynced
	}
	if err := appendStart(start); err != nil {
		return err
	}
	if at.ahead != nil {
		at.a = at.ahead.Attempt()
	} else {
		at.a = r.newAttempt(n, pre.rs, at.retry)
	}
	at.a.Upstream = r.upstreamOutputs(n)
	at.a.InputDigest = at.input
	if err := r.makeDirs(filepath.Dir(at.a.OutputPath), r.t.dir.Artifacts(r.t.id)); err != nil {
		return err
	}
	at.began = r.e.opts.Clock.Now()
	at.a.Started = func(int) error {
		// While the STEP_START's fsync may still be running: a file left
		// by an earlier run is not this attempt's output. Only a shell
		// body's is read.
		if s.Command != "" {
			os.Remove(at.a.PublishPath)
		}
		if err := r.w.Sync(); err != nil {
			return err
		}
		at.began = r.e.opts.Clock.Now()
		r.rep.Started(s.ID, at.retry)
		return nil
	}
	at.a.Running = func(pgid int) {
		at.pgid = pgid
		// The process group, for a later run to end what a crash leaves
		// running (docs/spec.md §5: the STEP_START or a record right after
		// names it), written while the body runs. Until it is on disk the
		// processes are still found by their APOLLO_ATTEMPT tag and their
		// shell, which leads the group. A failed write is the writer's
		// sticky error, which the STEP_END's append reports.
		rec := &eventlog.Record{EventType: eventlog.StepProcess, StepID: s.ID, Status: eventlog.Running,
			RetryCount: at.retry, PGID: pgid}
		_ = r.w.AppendUnsynced(rec)
	}
	return nil
}

// notStarted fails an attempt whose body cannot run, once its STEP_START is
// durable. The error is the log's: the run must stop.
func (r *taskRun) notStarted(at *attemptRun, why error) (executor.Result, error) {
	at.close()
	if err := at.a.Started(0); err != nil {
		return executor.Result{}, err
	}
	return executor.Result{Err: why, ExitCode: -1, NotStarted: true}, nil
}

// recordEnd appends the attempt's STEP_END and tells the scheduler what
// comes next: the step's end, or a retry after a delay.
func (r *taskRun) recordEnd(ctx context.Context, at *attemptRun, res executor.Result) nodeDone {
	n, s := at.n, at.n.rs.step
	var dur time.Duration
	if !at.began.IsZero() {
		dur = r.e.opts.Clock.Now().Sub(at.began)
	}
	if res.Err != nil {
		// What the attempt left running is ended before the step's next
		// attempt or its cleanup (recoverPrevious).
		n.prevToken, n.prevPGID = executor.AttemptToken(r.absLog, s.ID, at.retry), at.pgid
	}
	rec, o := r.stepEnd(ctx, n, s.ID, at.retry, at.input, res, true)
	rec.DurationMS = dur.Milliseconds()
	rec.CachedFrom = at.cachedFrom
	add := r.w.AppendUnsynced
	if at.endDurable {
		add = func(rec *eventlog.Record) error { return r.appendFor(s, rec) }
	}
	if err := add(rec); err != nil {
		return nodeDone{n: n, logErr: err}
	}
	d := r.settleEnd(n, at.retry, o)
	r.noteStepEnd(s, rec)
	// The STEP_END is written without an fsync of its own: the scheduler
	// starts a dependent next, whose durable STEP_START (before its body
	// runs) carries this record to disk in the same fsync, or, when it
	// starts nothing, an fsync at once. So a STEP_END is durable before
	// anything acts on it, with one fsync per step instead of two.
	d.unsynced = !at.endDurable && s.Durability != pipeline.DurabilityBatch
	note := rec.ErrorMessage
	if at.cachedFrom != "" {
		note = rec.Message
	}
	r.rep.Ended(s.ID, shownStatus(rec.Status), at.retry, dur, note, d.delay)
	return d
}

// stepEnd is the STEP_END of attempt retry of step id given its result,
// and the decision it records: the step's end, or a retry after a delay
// (n nil, or no ctx, decides no retry). Every STEP_END of an attempt is
// made here; local adds the workspace hint a failed local shell step may
// need.
func (r *taskRun) stepEnd(ctx context.Context, n *node, id string, retry int, input string, res executor.Result,
	local bool) (*eventlog.Record, outcome) {
	if len(res.Output) > MaxOutputRecord && res.Err == nil {
		res.Err = fmt.Errorf("the step's output is %d bytes; the log keeps at most %d (1 MiB) of a step's output: "+
			"write large data to a file (under {{artifacts_dir}}) and output its path", len(res.Output), MaxOutputRecord)
		res.Output = nil
	}
	rec := &eventlog.Record{EventType: eventlog.StepEnd, StepID: id, RetryCount: retry,
		InputDigest: input, OutputDigest: res.OutputDigest,
		TimedOut: res.TimedOut, Interrupted: res.Interrupted, Message: res.Note}
	if res.ExitCode != 0 {
		code := res.ExitCode
		rec.ExitCode = &code
	}
	o := outcome{res: res}
	switch {
	case res.Err == nil:
		rec.Status, rec.Output = eventlog.Success, res.Output
	case n != nil && ctx != nil && r.mayRetry(ctx, n, res):
		o.delay = retryDelay(r.t.p, n.rs.step, n.attempts)
		rec.Status, rec.ErrorMessage, rec.NextDelayMS = eventlog.Running, res.Err.Error(), o.delay.Milliseconds()
	default:
		if local && n != nil {
			if hint := r.workspaceHint(n.rs.step, res.Err.Error()); hint != "" {
				res.Err = fmt.Errorf("%w%s", res.Err, hint)
			}
		}
		rec.Status, rec.ErrorMessage = eventlog.Failed, res.Err.Error()
		o.err = res.Err
	}
	o.status = rec.Status
	rec.ErrorMessage = bounded(r.mask.String(rec.ErrorMessage))
	rec.Message = bounded(r.mask.String(rec.Message))
	if r.mask != nil && len(rec.Output) > 0 {
		// A value saved before it was a secret is not written now.
		rec.Output = json.RawMessage(r.mask.String(string(rec.Output)))
	}
	return rec, o
}

// settleEnd brings n up to date with its attempt's recorded end o, and
// says what the scheduler does next.
func (r *taskRun) settleEnd(n *node, retry int, o outcome) nodeDone {
	d := nodeDone{n: n, attempt: retry, status: o.status, delay: o.delay, err: o.err}
	switch o.status {
	case eventlog.Success:
		n.outDigest, n.output = o.res.OutputDigest, o.res.Output
	default:
		n.unclean = true
	}
	return d
}

// shownStatus is a STEP_END's status as progress shows it: a retry due is
// RETRY.
func shownStatus(status string) string {
	if status == eventlog.Running {
		return "RETRY"
	}
	return status
}

// endWithoutRunning writes a STEP_END for a step this invocation settles
// without running it.
func (r *taskRun) endWithoutRunning(n *node, status, msg string) error {
	rec := &eventlog.Record{EventType: eventlog.StepEnd, StepID: n.id(), Status: status,
		RetryCount: max(n.retry-1, 0), ErrorMessage: msg}
	if err := r.appendFor(n.rs.step, rec); err != nil {
		return err
	}
	n.final = status
	n.lastErr = msg
	r.noteStepEnd(n.rs.step, rec)
	r.rep.Ended(n.id(), status, rec.RetryCount, 0, msg, 0)
	return nil
}

// mayRetry reports whether a failed attempt gets another one in this
// invocation.
func (r *taskRun) mayRetry(ctx context.Context, n *node, res executor.Result) bool {
	s := n.rs.step
	if ctx.Err() != nil || res.Interrupted || s.RetryPolicy == pipeline.RetryNone || s.RetryPolicy == "" {
		return false
	}
	return n.attempts <= s.MaxRetries
}

// MaxOutputRecord is the most a step's output (its returned value, or what
// its shell body published) may take in its STEP_END: records stay small
// enough to replay fast, and far below the log's line limit.
const MaxOutputRecord = 1 << 20

// maxMessage is the most of an error or a note that a record keeps.
const maxMessage = 64 << 10

// bounded cuts a message for a record to maxMessage bytes, saying how much
// was cut; the attempt's output file keeps all of it.
func bounded(msg string) string {
	if len(msg) <= maxMessage {
		return msg
	}
	cut := msg[:maxMessage]
	for !utf8.ValidString(cut) && len(cut) > maxMessage-4 {
		cut = cut[:len(cut)-1]
	}
	return fmt.Sprintf("%s… [%d more bytes]", cut, len(msg)-len(cut))
}
