package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// A run: step is run by the engine itself, not by an executor: its
// attempt runs the sub-pipeline as a task of its own, with its own log and
// lock in the same state folder (docs/spec.md §2.11). The child's task id
// is derived from the parent's (pipeline.ChildTaskID), so a resume of the
// parent finds the child's log and resumes it: its finished steps are
// kept. The step succeeds when the child task completes, its output the
// outputs of the child's steps.

// childRun is how an attempt of a run: step runs its sub-pipeline.
type childRun struct {
	path string
	ro   RunOptions
}

// childRunOf describes the sub-pipeline run of rs in task t, in the child
// log at log (childLog).
//
// A child variable that holds a secret of the parent — inherited from one
// of its secret_vars, or a with: value that mask changes — is a secret
// var of the child too: masked in its records and output.
func childRunOf(t *task, rs *renderedStep, ro RunOptions, log string, mask *textfmt.Masker) childRun {
	s := rs.step
	id := pipeline.ChildTaskID(t.id, s.ID) // checked by checkChildID
	if logID, _, _, ok := statedir.ParseLogName(filepath.Base(log)); ok {
		// The log's own task: an attempt that an older apollo started
		// named a child log of task <parent>.<step>, which it resumes.
		id = logID
	}
	vars := make(map[string]string, len(rs.with))
	for k, v := range rs.with {
		vars[k] = fmt.Sprint(v)
	}
	var secret []string
	for k, v := range vars {
		if mask.String(v) != v {
			secret = append(secret, k)
		}
	}
	inherited := map[string]string{}
	for k, v := range t.vars {
		if _, set := vars[k]; !set {
			inherited[k] = v
			if slices.Contains(t.p.SecretVars, k) {
				secret = append(secret, k)
			}
		}
	}
	slices.Sort(secret)
	return childRun{path: pipeline.RunPath(t.p, s), ro: RunOptions{Vars: vars, inherited: inherited, secretVars: secret,
		TaskID: id, log: log, AcceptChanges: ro.AcceptChanges, Hub: ro.Hub}}
}

// childFresh reports whether the attempt of n starts its sub-pipeline
// anew: the step's first attempt in this log, or its first since it
// succeeded (a reset or resume_from runs it again). Any other attempt
// follows a failed or cut-off one, and resumes the child's log.
func childFresh(n *node, retry int) bool {
	return retry == 0 || (n.attempts == 1 && n.rerunOK)
}

// endedOK reports whether a step's last attempt ended SUCCESS, whatever an
// intervention (reset, resume_from) made of its state since.
func endedOK(st *eventlog.StepState) bool {
	return st.Attempts > 0 && !st.Dirty && !st.Unclean && st.LastError == "" && st.OutputDigest != ""
}

// childLog is the log in which an attempt of the run: step whose child
// task is childID runs it. The step's first attempt, or its first since it
// succeeded (fresh), starts a new log, named after the parent's log at
// parentLog and after every earlier log of the child. Any other attempt
// resumes the log its previous attempt named (recorded, a file name), so a
// crash before, while or after the child runs leaves no doubt which log is
// the step's. A log written before STEP_START named it leaves the child's
// newest log to resume, unless it began before parentLog: an earlier
// parent run's.
func (t *task) childLog(childID string, fresh bool, recorded, parentLog string, now time.Time) string {
	if !fresh && recorded != "" {
		return filepath.Join(t.dir.Logs(), recorded)
	}
	_, start, _, _ := statedir.ParseLogName(filepath.Base(parentLog))
	logs, _ := t.dir.TaskLogs(childID) // none readable: its run says why
	if n := len(logs); n > 0 {
		if !fresh && logs[n-1].Start >= start {
			return logs[n-1].Path
		}
		start = max(start, logs[n-1].Start+1)
	}
	return t.dir.Log(childID, max(start, now.Unix()))
}

// child returns an engine for a sub-pipeline: this one's options, its
// progress lines written to w (the attempt's output file).
func (e *Engine) child(w *os.File) *Engine {
	opts := e.opts
	opts.Stdout, opts.Stderr = w, w
	opts.Progress, opts.Color = ProgressPlain, false
	return New(opts)
}

// childPipeline carries the attempts of a run: step: the sub-pipeline's
// task, run (or resumed) to its end. Which of the child's logs an attempt
// runs is chosen before it starts and written in its STEP_START.
type childPipeline struct{ r *taskRun }

func (c childPipeline) begin(_ context.Context, at *attemptRun) error {
	r, n := c.r, at.n
	return r.appendStart(at, func(start *eventlog.Record) {
		at.childLog = r.t.childLog(pipeline.ChildTaskID(r.t.id, n.id()), childFresh(n, at.retry), n.childLog,
			r.logPath, r.e.opts.Clock.Now())
		n.childLog = filepath.Base(at.childLog)
		start.ChildLog = n.childLog
	})
}

func (c childPipeline) carry(ctx context.Context, at *attemptRun) (executor.Result, error) {
	return c.r.runChild(ctx, at)
}

// runChild is the attempt of a run: step. The error is the parent's log's:
// the run must stop.
func (r *taskRun) runChild(ctx context.Context, at *attemptRun) (executor.Result, error) {
	n := at.n
	if err := at.a.Started(0); err != nil { // the STEP_START is durable first
		return executor.Result{}, err
	}
	cr := childRunOf(r.t, n.rs, r.ro, at.childLog, r.mask)
	out, err := os.OpenFile(at.a.OutputPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return executor.Result{Err: fmt.Errorf("open the output file: %w", err), ExitCode: -1, NotStarted: true}, nil
	}
	defer out.Close()
	fmt.Fprintf(out, "apollo: run %s as task %s\n", cr.path, cr.ro.TaskID)
	child := r.e.child(out)
	// The step's timeout stops the child task as an interrupt would: its
	// steps are interrupted, not timed out by a timeout of their own.
	cctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	if d := n.rs.step.Timeout; d > 0 {
		timer := time.AfterFunc(d, func() { stop(errChildTimeout) })
		defer timer.Stop()
	}
	r.e.crash("subpipe:before")
	cerr := child.Run(cctx, cr.path, cr.ro)
	r.e.crash("subpipe:after")
	timedOut := errors.Is(context.Cause(cctx), errChildTimeout) && ctx.Err() == nil
	res := executor.Result{}
	switch {
	case cerr == nil:
		res.Output, res.Err = childOutputs(cr.ro.log, cr.ro.TaskID)
		if res.Err == nil {
			res.OutputDigest = sha256Hex(res.Output)
		}
	case timedOut:
		res.TimedOut = true
		res.Err = fmt.Errorf("timed out after %s: sub-pipeline %s (task %s) was stopped; its next attempt resumes it", n.rs.step.Timeout, cr.path, cr.ro.TaskID)
	case ctx.Err() != nil || errors.As(cerr, new(*InterruptedError)):
		res.Interrupted = true
		res.Err = fmt.Errorf("interrupted: sub-pipeline %s (task %s) was stopped; its next attempt resumes it", cr.path, cr.ro.TaskID)
	default:
		res.Err = fmt.Errorf("sub-pipeline %s: %w%s", cr.path, cerr, childErrors(cr.ro.log, cr.ro.TaskID, cerr))
	}
	if res.Err != nil {
		res.ExitCode = 1
		fmt.Fprintf(out, "apollo: %v\n", res.Err)
	}
	return res, nil
}

// checkChildID refuses the child task id of run: step s of task taskID if
// it cannot be a task id or another step of children (child task id →
// step id) has it, and else adds it there. A foreach template has none: its
// instances run the sub-pipeline.
func checkChildID(p *pipeline.Pipeline, s *pipeline.Step, taskID string, children map[string]string) error {
	if s.Foreach != nil {
		return nil
	}
	id := pipeline.ChildTaskID(taskID, s.ID)
	if err := statedir.ValidTaskID(id); err != nil {
		return &pipeline.Error{File: p.Path, Line: s.Line, Step: s.ID,
			Msg: fmt.Sprintf("run %q: the sub-pipeline's task id %s: %v; choose a shorter --task-id", s.Run, id, err)}
	}
	if other, ok := children[id]; ok {
		return &pipeline.Error{File: p.Path, Line: s.Line, Step: s.ID,
			Msg: fmt.Sprintf("run %q: steps %s and %s would both run their sub-pipeline as task %s; rename one", s.Run, other, s.ID, id)}
	}
	children[id] = s.ID
	return nil
}

// pinRunFiles makes the bytes of each run: step's pipeline file part of
// its definition and input digests, as a Lua step's files are: editing the
// sub-pipeline of a step that succeeded is a change a resume names. It
// also refuses, before anything runs, a child task id (of task taskID)
// that cannot be one, or that two steps would share (ChildTaskID writes
// load[eu] and load_eu_ alike): one would resume the other's task.
func pinRunFiles(p *pipeline.Pipeline, steps []*renderedStep, taskID string) (children map[string]string, err error) {
	type read struct {
		digest string
		err    error
	}
	seen := map[string]read{} // a foreach's instances run the same file
	children = map[string]string{}
	for _, rs := range steps {
		s := rs.step
		if s.Run == "" {
			continue
		}
		if err := checkChildID(p, s, taskID, children); err != nil {
			return nil, err
		}
		got, done := seen[s.Run]
		if !done {
			b, err := os.ReadFile(filepath.Join(p.Dir, s.Run))
			got = read{sha256Hex(b), err}
			seen[s.Run] = got
		}
		if got.err != nil {
			return nil, &pipeline.Error{File: p.Path, Line: s.Line, Step: s.ID, Msg: fmt.Sprintf("run %q: %v", s.Run, got.err)}
		}
		rs.filesDigest = got.digest
		rs.defDigest = definitionDigest(rs)
	}
	return children, nil
}

// errChildTimeout is why a run: step's timeout stopped its child task.
var errChildTimeout = errors.New("the run step's timeout_seconds passed")

// childOutputs reads the outputs of a complete child task's steps from its
// log at path: an object of step id to output, the steps that published
// none left out.
func childOutputs(path, taskID string) (json.RawMessage, error) {
	state, _, err := statedir.Replay(path, taskID, nil)
	if err != nil {
		return nil, fmt.Errorf("read the outputs of task %s: %w", taskID, err)
	}
	outputs := map[string]json.RawMessage{}
	for id, st := range state.Steps {
		if st.Status == eventlog.Success && len(st.Output) > 0 {
			outputs[id] = st.Output
		}
	}
	return json.Marshal(outputs) // sorted keys: canonical
}

// childErrors is what a failed child task's error adds: the error of each
// failed step, from the child's log at path.
func childErrors(path, taskID string, err error) string {
	var tf *TaskFailedError
	if !errors.As(err, &tf) || len(tf.Failed) == 0 {
		return ""
	}
	state, _, rerr := statedir.Replay(path, taskID, nil)
	if rerr != nil {
		return ""
	}
	var parts []string
	for _, id := range tf.Failed {
		if st := state.Steps[id]; st != nil && st.LastError != "" {
			parts = append(parts, fmt.Sprintf("step %s: %s", id, st.LastError))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, "; ") + ")"
}

// addSecretVars makes names secret vars of p, those it has.
func addSecretVars(p *pipeline.Pipeline, vars map[string]string, names []string) {
	for _, name := range names {
		if _, ok := vars[name]; ok && !slices.Contains(p.SecretVars, name) {
			p.SecretVars = append(p.SecretVars, name)
		}
	}
}
