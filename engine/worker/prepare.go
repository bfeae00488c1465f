package worker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"apollo/engine/executor"
)

// prepare builds the executor's view of the attempt, as the local engine
// does (engine/attempt.go), but with its output and published values in
// the worker's own folder dir, and its processes tagged as this worker's.
func (w *Worker) prepare(ctx context.Context, a *attempt, dir string) (executor.Executor, *executor.Attempt, error) {
	work := a.work
	s := work.StepDef()
	env := append(os.Environ(), work.Env...)
	publish := filepath.Join(dir, "published.out")
	env = append(env, "APOLLO_OUTPUT="+publish, executor.AttemptEnv+"="+a.token, "APOLLO_WORKER="+w.id)
	mk, err := newMarkerStore(ctx, w, a)
	if err != nil {
		return nil, nil, err
	}
	exa := &executor.Attempt{TaskID: work.Task, StepID: work.Step, RetryCount: work.Attempt, Step: s,
		Command: work.Command, Env: env, Dir: w.o.Workdir, OutputPath: filepath.Join(dir, "output.log"),
		OutputLimit: work.OutputLimit, PublishPath: publish, KillGrace: work.KillGrace,
		Pipeline: work.Pipeline, Vars: work.Vars, Params: work.Params, Upstream: work.Upstream,
		InputDigest: work.InputDigest, ArtifactsDir: work.ArtifactsDir, StateDir: work.StateDir, Markers: mk,
		Sources: work.Sources}
	if exa.KillGrace <= 0 {
		exa.KillGrace = 5 * time.Second
	}
	switch {
	case s.Command != "":
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
