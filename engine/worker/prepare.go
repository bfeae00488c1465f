package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"apollo/engine/executor"
)

// prepare builds the executor's view of the attempt, as the local engine
// does (engine/attempt.go), but with its output and published values in
// the worker's own folder dir, and its processes tagged as this worker's.
func (w *Worker) prepare(ctx context.Context, a *attempt, dir string) (executor.Executor, *executor.Attempt, error) {
	work := a.work
	s := work.StepDef()
	base := os.Environ()
	env := append(base[:len(base):len(base)], work.Env...)
	// Names of this attempt's own: the folder is kept for the next
	// attempt, and a process this one leaves behind must not write into
	// the next one's $APOLLO_OUTPUT.
	n := strconv.FormatInt(w.attemptN.Add(1), 10)
	publish := filepath.Join(dir, "published-"+n+".out")
	env = append(env, "APOLLO_OUTPUT="+publish, executor.AttemptEnv+"="+a.token, "APOLLO_WORKER="+w.id)
	mk, err := newMarkerStore(ctx, w, a)
	if err != nil {
		return nil, nil, err
	}
	exa := &executor.Attempt{TaskID: work.Task, StepID: work.Step, RetryCount: work.Attempt, Step: s,
		Command: work.Command, Env: env, Dir: w.o.Workdir, OutputPath: filepath.Join(dir, "output-"+n+".log"),
		OutputLimit: work.OutputLimit, PublishPath: publish, KillGrace: work.KillGrace,
		Pipeline: work.Pipeline, Vars: work.Vars, Params: work.Params, Upstream: work.Upstream,
		InputDigest: work.InputDigest, ArtifactsDir: work.ArtifactsDir, StateDir: work.StateDir, Markers: mk,
		Sources: work.Sources}
	if exa.KillGrace <= 0 {
		exa.KillGrace = 5 * time.Second
	}
	switch {
	case s.Container != nil:
		if w.o.Container == nil {
			// Never delivered here (a worker without an engine does not
			// pull the container queue); never run on this host either.
			return missingShell{fmt.Errorf("step %s runs in a container (image: %s) and worker %s runs none: "+
				"start workers of pool %s with --container-engine podman|docker", s.ID, s.Container.Image, w.id, work.Pool)}, exa, nil
		}
		return containerBody{w: w, a: a, pass: len(base)}, exa, nil
	case s.Command != "":
		if err := executor.FindShell(exa); err != nil {
			// Not a lost attempt to hand to another worker: a failed one,
			// which says on which worker, and retries as the step says.
			return missingShell{fmt.Errorf("shell: %v on worker %s", err, w.id)}, exa, nil
		}
		// A plain command runs without a shell, as in a local run: the
		// running file names its attempt by its tag (attempt.begin), and
		// the fence learns its group from attempt.bodyRuns.
		exa.Direct = true
		return w.shell, exa, nil
	case s.Isolation == "process":
		// The child asks this worker for its markers, as a runner's child
		// asks the runner: they go through the hub's gate.
		bin, err := os.Executable()
		if err != nil {
			return nil, nil, fmt.Errorf("isolation: process: find the apollo binary: %w", err)
		}
		return &executor.Isolated{Binary: bin}, exa, nil
	default:
		return w.lua, exa, nil
	}
}

// missingShell is the executor of an attempt whose step's shell is not
// installed on this worker: the attempt starts, runs nothing and fails,
// with exit status 127 as a shell gives for a command it cannot find.
type missingShell struct{ err error }

func (m missingShell) Run(ctx context.Context, a *executor.Attempt) executor.Result {
	if err := a.Started(0); err != nil {
		return executor.Result{Err: err, ExitCode: -1, NotStarted: true}
	}
	return executor.Result{Err: m.err, ExitCode: 127}
}
