package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/eventlog"
)

// What an attempt is given, whatever carries it: its environment, its
// folder, the outputs of the steps upstream.

// upstreamOutputs is what n's dependencies published, and the other
// ancestors its code names (Step.OutputRefs), by step id.
func (r *taskRun) upstreamOutputs(n *node) map[string]json.RawMessage {
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
func (r *taskRun) upstreamDigests(n *node) map[string]string {
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
func (r *taskRun) newAttempt(n *node, rs *renderedStep, retry int) *executor.Attempt {
	s := rs.step
	t := r.t
	env := make([]string, 0, len(r.baseEnv)+len(rs.env)+len(r.secrets)+len(s.Item)+7)
	env = append(env, r.baseEnv...)
	env = t.appendStepEnv(env, rs, retry)
	out := t.dir.Output(t.id, s.ID, retry)
	publish := t.publishPath(s.ID, retry)
	env = append(env,
		"APOLLO_OUTPUT="+publish,
		executor.AttemptEnv+"="+executor.AttemptToken(r.absLog, s.ID, retry),
	)
	for _, k := range slices.Sorted(maps.Keys(r.secrets)) {
		env = append(env, k+"="+r.secrets[k])
	}
	env = appendItemEnv(env, s)
	if tp := r.traceparent(spanAttempt, s.ID, retry); tp != "" {
		env = setEnv(env, traceparentEnv, tp)
	}
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
		Secrets: r.secrets, Mask: r.mask, Sources: rs.sources,
		Direct: true} // a local run finds a body's processes by their tag until STEP_PROCESS names the group
}

// publishPath is $APOLLO_OUTPUT of attempt retry of step id: the file
// beside its output file, <step>.<n>.out. It lasts until the body ends.
func (t *task) publishPath(id string, retry int) string {
	return strings.TrimSuffix(t.dir.Output(t.id, id, retry), ".log") + ".out"
}

// stepDir is where a step's body runs: its working_dir, relative to the
// pipeline's folder, or the workspace.
func (r *taskRun) stepDir(s *pipeline.Step) string {
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
func (r *taskRun) workspaceHint(s *pipeline.Step, msg string) string {
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
