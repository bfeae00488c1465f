package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/eventlog"
)

// work runs one step: ends the processes its previous attempt left
// running (cut off by a crash, or failed), cleans up after it, then makes
// one attempt.
func (r *run) work(ctx context.Context, n *node) nodeDone {
	s := n.rs.step
	if s.When != "" && n.attempts == 0 {
		if run, d := r.decideWhen(ctx, n); !run {
			if n.prevToken != "" && (n.dirty || n.unclean) {
				executor.EndLeftovers(n.prevToken, n.prevPGID, r.e.opts.KillGrace)
			}
			return d
		}
	}
	if r.hub != nil && s.Foreach == nil && s.Run == "" { // a foreach template expands here, a sub-pipeline runs here
		return r.remoteWork(ctx, n)
	}
	ended := 0
	if (n.dirty || n.unclean) && n.prevToken != "" {
		// A process that left the attempt's process group (setsid, a
		// daemon) is found by its APOLLO_ATTEMPT tag: an old attempt's
		// processes never run beside its cleanup or its rerun.
		ended = executor.EndLeftovers(n.prevToken, n.prevPGID, r.e.opts.KillGrace)
	}
	if n.dirty || (n.unclean && s.HasCleanup()) || ended > 0 {
		if d, ok := r.cleanup(ctx, n, ended); !ok {
			return d
		}
	} else if n.attempts == 0 && (n.plan.Action == ActionRerun || n.plan.Action == ActionCleanRerun) {
		r.rep.event(s.ID, "rerun: "+n.plan.Reason)
	}
	if !r.cacheable(n) {
		return r.attempt(ctx, n, nil)
	}
	return r.cachedAttempt(ctx, n)
}

// cachedAttempt makes one attempt of a step with cache:, unless its
// result is in the cache, and saves the result of a success.
func (r *run) cachedAttempt(ctx context.Context, n *node) nodeDone {
	pr, err := r.probe(n)
	if err != nil {
		return r.attempt(ctx, n, nil) // the attempt fails on the same error
	}
	// A step --resume-from or --only names to run again runs: its result
	// is what is in question.
	if n.attempts == 0 && !r.ro.NoCache && !r.sc.rerun[n.rs.step.ID] {
		if d, hit := r.fromCache(n, pr); hit {
			return d
		}
	}
	d := r.attempt(ctx, n, &pr.prepared)
	if d.status == eventlog.Success && d.logErr == nil {
		r.saveCache(n, pr)
	}
	return d
}

// cleanup runs before a rerun, after ended leftover processes of the
// previous attempt were ended. It returns ok=false with the step's end when
// the step must not run.
func (r *run) cleanup(ctx context.Context, n *node, ended int) (nodeDone, bool) {
	s := n.rs.step
	var notes []string
	if ended > 0 {
		which := "the failed attempt"
		if n.dirty {
			which = "the cut-off attempt"
		}
		notes = append(notes, fmt.Sprintf("ended %d process(es) left running by %s", ended, which))
	}
	rec := &eventlog.Record{EventType: eventlog.Cleanup, StepID: s.ID, Status: eventlog.Pending,
		RetryCount: max(n.retry-1, 0), Dirty: n.dirty}
	began := r.e.opts.Clock.Now()
	if s.HasCleanup() {
		// The failed attempt's STEP_END is on disk before its cleanup runs
		// (a no-op unless its fsync is still under way).
		if err := r.w.Sync(); err != nil {
			return nodeDone{n: n, logErr: err}, false
		}
		r.rep.event(s.ID, "cleanup before rerun")
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
	} else if n.dirty || ended > 0 {
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
		r.rep.ended(s.ID, eventlog.Failed, rec.RetryCount, 0, rec.ErrorMessage, 0)
		return nodeDone{n: n, status: eventlog.Failed, err: errors.New(rec.ErrorMessage)}, false
	}
	if n.attempts == 0 { // what the resume found, said where it is dealt with
		why := rec.Message
		if why == "" {
			why = n.plan.Reason
		}
		r.rep.event(s.ID, "rerun: "+why)
	}
	return nodeDone{}, true
}

// runCleanup runs the step's cleanup hook through its executor.
func (r *run) runCleanup(ctx context.Context, n *node) executor.Result {
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

// upstreamOutputs is what n's dependencies published, and the other
// ancestors its code names (Step.OutputRefs), by step id.
func (r *run) upstreamOutputs(n *node) map[string]json.RawMessage {
	refs := n.rs.step.OutputRefs
	upstream := make(map[string]json.RawMessage, len(n.deps)+len(refs))
	for _, d := range n.deps {
		upstream[d.id()] = d.output
	}
	for _, id := range refs {
		upstream[id] = r.node(id).output
	}
	return upstream
}

// upstreamDigests are the output digests of the same steps, for the input
// digest.
func (r *run) upstreamDigests(n *node) map[string]string {
	refs := n.rs.step.OutputRefs
	upstream := make(map[string]string, len(n.deps)+len(refs))
	for _, d := range n.deps {
		upstream[d.id()] = d.outDigest
	}
	for _, id := range refs {
		upstream[id] = r.node(id).outDigest
	}
	return upstream
}

// newAttempt describes attempt retry of n, rendered as rs, for an
// executor, all but its Upstream (upstreamOutputs): it reads nothing a
// running step may change, so that warmUp can call it while n's
// dependencies run.
func (r *run) newAttempt(n *node, rs *renderedStep, retry int) *executor.Attempt {
	s := rs.step
	t := r.t
	env := make([]string, 0, len(r.baseEnv)+len(rs.env)+len(r.secrets)+len(s.Item)+7)
	env = append(env, r.baseEnv...)
	env = t.appendStepEnv(env, rs, retry)
	out := t.dir.Output(t.id, s.ID, retry)
	publish := strings.TrimSuffix(out, ".log") + ".out"
	env = append(env,
		"APOLLO_OUTPUT="+publish,
		executor.AttemptEnv+"="+executor.AttemptToken(r.absLog, s.ID, retry),
	)
	for _, k := range slices.Sorted(maps.Keys(r.secrets)) {
		env = append(env, k+"="+r.secrets[k])
	}
	env = appendItemEnv(env, s)
	var failed []executor.FailedStep
	if s.Handler != "" {
		failed = r.failed
		ids := make([]string, len(failed))
		for i, f := range failed {
			ids[i] = f.ID
		}
		status := eventlog.Success
		if len(failed) > 0 {
			status = eventlog.Failed
		}
		env = append(env, "APOLLO_FAILED_STEPS="+strings.Join(ids, ","), "APOLLO_TASK_STATUS="+status)
	}
	vars := make(map[string]string, len(t.vars)+1)
	for k, v := range t.vars {
		vars[k] = v
	}
	vars["step_id"] = s.ID
	return &executor.Attempt{TaskID: t.id, StepID: s.ID, RetryCount: retry, Step: s, Command: rs.command,
		Env: env, Dir: r.stepDir(s), OutputPath: out, OutputLimit: max(r.e.opts.MaxOutputBytes, 0),
		PublishPath: publish, KillGrace: r.e.opts.KillGrace,
		Pipeline: t.p, Vars: vars, Params: rs.with,
		ArtifactsDir: t.dir.Artifacts(t.id), StateDir: t.dir.Root, Markers: r.markers, Failed: failed,
		Secrets: r.secrets, Mask: r.mask, Sources: rs.sources}
}

// executorFor picks the executor of a step's body.
func (r *run) executorFor(s *pipeline.Step) (executor.Executor, error) {
	if s.Command == "" {
		return r.luaExecutor(s)
	}
	return r.e.opts.Executors["shell"], nil
}

// luaExecutor runs Lua in this process, or in a child apollo process for
// isolation: process.
func (r *run) luaExecutor(s *pipeline.Step) (executor.Executor, error) {
	if s.Isolation == "process" {
		bin, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("isolation: process: find the apollo binary: %w", err)
		}
		return &executor.Isolated{Binary: bin}, nil
	}
	ex, ok := r.e.opts.Executors["lua"]
	if !ok {
		return nil, errors.New("no executor for Lua steps in this build")
	}
	return ex, nil
}

// attempt makes one attempt of n and records it: its STEP_START, made
// durable before the body may run; the body; its STEP_END. pre is n
// rendered with its upstream outputs and its input digest when the caller
// has them already (a cached step's probe), else nil.
func (r *run) attempt(ctx context.Context, n *node, pre *prepared) nodeDone {
	retry := n.retry
	n.retry++
	n.attempts++
	at, err := r.appendStart(n, retry, pre)
	if err != nil {
		return nodeDone{n: n, logErr: err}
	}
	res, err := r.runBody(ctx, at)
	if err != nil {
		return nodeDone{n: n, logErr: err}
	}
	return r.recordEnd(ctx, at, res)
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
func (r *run) prepareAttempt(n *node) (prepared, error) {
	rs, err := r.late(n)
	return prepared{rs: rs, input: inputDigest(rs, r.upstreamDigests(n), secretsDigest(r.secrets))}, err
}

// attemptRun is one attempt of a step while it runs.
type attemptRun struct {
	n     *node
	retry int
	input string // its input digest
	a     *executor.Attempt
	ahead executor.Ahead // its shell, started ahead (warmUp), or nil
	began time.Time      // when its body was released
	pgid  int            // its process group, once it runs
	// lateErr says why the step's upstream outputs could not be rendered
	// into it: the attempt fails without running.
	lateErr error
	// childLog is the log of a run: step's sub-pipeline task (childLog).
	childLog string
}

// appendStart appends the attempt's STEP_START and prepares the attempt.
//
// Started waits for the record's fsync before the body may run, whatever
// the durability setting. For a shell body started here the fsync starts at
// once, so the disk works while the attempt is prepared and its process
// forked (held: forking blocks this thread). A Lua body, or a shell started
// ahead (warmUp), calls Started right away, which then does the fsync on
// this goroutine instead of waking one to do it. A crash in between leaves
// a dirty step whose body never ran; its rerun is preceded by cleanup, as
// for any dirty step.
func (r *run) appendStart(n *node, retry int, pre *prepared) (*attemptRun, error) {
	s := n.rs.step
	var lateErr error
	if pre == nil {
		p, err := r.prepareAttempt(n)
		pre, lateErr = &p, err
	}
	rs := pre.rs
	if n.refused != nil {
		lateErr = n.refused
	}
	at := &attemptRun{n: n, retry: retry, input: pre.input, ahead: r.takeWarm(n), lateErr: lateErr}
	start := &eventlog.Record{EventType: eventlog.StepStart, StepID: s.ID, Status: eventlog.Running,
		RetryCount: retry, InputDigest: at.input}
	if s.Run != "" && s.Foreach == nil {
		at.childLog = r.t.childLog(pipeline.ChildTaskID(r.t.id, s.ID), childFresh(n, retry), n.childLog,
			r.logPath, r.e.opts.Clock.Now())
		n.childLog = filepath.Base(at.childLog)
		start.ChildLog = n.childLog
	}
	appendStart := r.w.AppendSyncing
	if s.Command == "" || at.ahead != nil {
		appendStart = r.w.AppendUnsynced
	}
	if err := appendStart(start); err != nil {
		at.close()
		return nil, err
	}
	if at.ahead != nil {
		at.a = at.ahead.Attempt()
	} else {
		at.a = r.newAttempt(n, rs, retry)
	}
	at.a.Upstream = r.upstreamOutputs(n)
	at.a.InputDigest = at.input
	if err := r.makeDirs(filepath.Dir(at.a.OutputPath), r.t.dir.Artifacts(r.t.id)); err != nil {
		at.close()
		return nil, err
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
		r.rep.started(s.ID, retry)
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
			RetryCount: retry, PGID: pgid}
		_ = r.w.AppendUnsynced(rec)
	}
	return at, nil
}

// close ends the shell started ahead for the attempt, if it was not run.
func (at *attemptRun) close() {
	if at.ahead != nil {
		at.ahead.Close()
	}
}

// runBody runs the attempt's body through its executor. The error is the
// log's: the run must stop.
func (r *run) runBody(ctx context.Context, at *attemptRun) (executor.Result, error) {
	s := at.n.rs.step
	if s.Foreach != nil {
		if err := at.a.Started(0); err != nil {
			return executor.Result{}, err
		}
		return r.expandBody(at.n), nil
	}
	if s.Run != "" && at.lateErr == nil {
		return r.runChild(ctx, at)
	}
	ex, err := r.executorFor(s)
	if at.lateErr != nil {
		err = at.lateErr
	}
	if err != nil {
		at.close()
		if serr := at.a.Started(0); serr != nil {
			return executor.Result{}, serr
		}
		return executor.Result{Err: err, ExitCode: -1, NotStarted: true}, nil
	}
	actx, cancel := executor.WithTimeout(ctx, s.Timeout)
	var res executor.Result
	if at.ahead != nil {
		res = at.ahead.Run(actx)
	} else {
		res = ex.Run(actx, at.a)
	}
	cancel()
	r.e.crash("body:after")
	if res.NotStarted {
		var we *eventlog.WriteError
		if errors.As(res.Err, &we) || r.w.Err() != nil {
			return res, res.Err
		}
	}
	return res, nil
}

// recordEnd appends the attempt's STEP_END and tells the scheduler what
// comes next: the step's end, or a retry after a delay.
func (r *run) recordEnd(ctx context.Context, at *attemptRun, res executor.Result) nodeDone {
	n, s := at.n, at.n.rs.step
	dur := r.e.opts.Clock.Now().Sub(at.began)
	if len(res.Output) > MaxOutputRecord && res.Err == nil {
		res.Err = fmt.Errorf("the step's output is %d bytes; the log keeps at most %d (1 MiB) of a step's output: "+
			"write large data to a file (under {{artifacts_dir}}) and output its path", len(res.Output), MaxOutputRecord)
		res.Output = nil
	}
	rec := &eventlog.Record{EventType: eventlog.StepEnd, StepID: s.ID, RetryCount: at.retry,
		InputDigest: at.input, OutputDigest: res.OutputDigest, DurationMS: dur.Milliseconds(),
		TimedOut: res.TimedOut, Interrupted: res.Interrupted, Message: res.Note}
	if res.ExitCode != 0 {
		code := res.ExitCode
		rec.ExitCode = &code
	}
	d := nodeDone{n: n, attempt: at.retry}
	if res.Err != nil {
		// What the attempt left running is ended before the step's next
		// attempt or its cleanup (work).
		n.prevToken, n.prevPGID = executor.AttemptToken(r.absLog, s.ID, at.retry), at.pgid
	}
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
		if hint := r.workspaceHint(s, res.Err.Error()); hint != "" {
			res.Err = fmt.Errorf("%w%s", res.Err, hint)
		}
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
	rec.ErrorMessage = bounded(r.mask.String(rec.ErrorMessage))
	rec.Message = bounded(r.mask.String(rec.Message))
	if r.mask != nil && len(rec.Output) > 0 {
		rec.Output = json.RawMessage(r.mask.String(string(rec.Output)))
	}
	if err := r.w.AppendUnsynced(rec); err != nil {
		return nodeDone{n: n, logErr: err}
	}
	d.unsynced = s.Durability != pipeline.DurabilityBatch
	shown := rec.Status
	if shown == eventlog.Running {
		shown = "RETRY"
	}
	r.rep.ended(s.ID, shown, at.retry, dur, rec.ErrorMessage, d.delay)
	return d
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

// stepDir is where a step's body runs: its working_dir, relative to the
// pipeline's folder, or the workspace.
func (r *run) stepDir(s *pipeline.Step) string {
	switch {
	case s.WorkingDir == "":
		return r.e.opts.Workdir
	case filepath.IsAbs(s.WorkingDir):
		return s.WorkingDir
	}
	return filepath.Join(r.t.p.Dir, s.WorkingDir)
}

// workspaceHint is what a failed shell step's error adds when the step may
// have looked for a file in the wrong folder: it runs in the workspace, the
// pipeline lies elsewhere, and its output says a file was not found.
func (r *run) workspaceHint(s *pipeline.Step, msg string) string {
	if s.Command == "" || !fileNotFound(msg) {
		return ""
	}
	switch {
	case s.WorkingDir != "":
		return fmt.Sprintf(" (the step ran in %s, its working_dir)", absPath(r.stepDir(s)))
	case absPath(r.e.opts.Workdir) != r.t.p.Dir:
		return fmt.Sprintf(" (the step ran in the workspace %s, not in the pipeline's folder %s; "+
			"set working_dir: . in the pipeline to run its steps there)", absPath(r.e.opts.Workdir), r.t.p.Dir)
	}
	return ""
}

// fileNotFound reports whether a failed shell step's message says a file
// was not found, in the words of bash, dash ("sh: 0: cannot open x: No
// such file"), coreutils and others.
func fileNotFound(msg string) bool {
	msg = strings.ToLower(msg)
	for _, sign := range []string{"no such file", "cannot stat", "can't open", "cannot open", "not found"} {
		if strings.Contains(msg, sign) {
			return true
		}
	}
	return false
}

// appendStepEnv appends the step's own env (sorted by name) and the
// variables that tell an attempt where it is: its task, step, attempt
// number, artifacts and state folders.
func (t *task) appendStepEnv(env []string, rs *renderedStep, retry int) []string {
	for _, k := range slices.Sorted(maps.Keys(rs.env)) {
		env = append(env, k+"="+rs.env[k])
	}
	return append(env,
		"APOLLO_TASK_ID="+t.id,
		"APOLLO_STEP_ID="+rs.step.ID,
		"APOLLO_RETRY_COUNT="+strconv.Itoa(retry),
		"APOLLO_ARTIFACTS_DIR="+t.dir.Artifacts(t.id),
		"APOLLO_STATE_DIR="+t.dir.Root,
	)
}

// appendItemEnv appends a foreach or matrix instance's item: APOLLO_ITEM,
// or APOLLO_ITEM_<AXIS> for a matrix.
func appendItemEnv(env []string, s *pipeline.Step) []string {
	for k, v := range s.Item {
		name := "APOLLO_ITEM"
		if axis, ok := strings.CutPrefix(k, "item."); ok {
			name += "_" + strings.ToUpper(strings.ReplaceAll(axis, "-", "_"))
		}
		env = append(env, name+"="+v)
	}
	return env
}
