package worker

import (
	"context"
	"fmt"

	"apollo/engine/container"
	"apollo/engine/executor"
	"apollo/engine/remote"
)

// containerName is the name of the container of attempt n of the work's
// step: from its dispatch id, so that any worker of the machine finds the
// container a dead worker's attempt left.
func containerName(work *remote.Work, n int) string {
	return container.Name("apollo-hub:" + remote.DispatchID(work.Run, work.Task, work.Step, n))
}

// containerBody runs a container step's attempt with the worker's engine
// (apollo worker --container-engine), through the code a local run uses
// (engine/container): the container of the step's previous attempt, if a
// dead worker left it on this machine, is removed first; the image is made
// present and resolved before the start, which carries its id, the
// attempt's heartbeats going on meanwhile (a pull may be long); the
// container is recorded in the worker's file once the start is stored, so
// that the next worker started there removes it if this one dies.
type containerBody struct {
	w *Worker
	a *attempt
	// pass is where, in the attempt's environment, what the container gets
	// begins: the work's env and the worker's APOLLO_* variables.
	pass int
}

func (c containerBody) Run(ctx context.Context, exa *executor.Attempt) executor.Result {
	w, a, work := c.w, c.a, c.a.work
	cfg := *w.o.Container
	spec := work.StepDef().Container
	id := remote.AttemptID(work.Task, work.Step, work.Attempt)
	name := containerName(work, work.Attempt)
	a.mu.Lock()
	a.image, a.box = spec.Image, boxRef{Name: name, Engine: cfg}
	a.mu.Unlock()
	fail := func(err error) executor.Result {
		if serr := exa.Started(0); serr != nil {
			return executor.Result{Err: serr, ExitCode: -1, NotStarted: true}
		}
		return executor.Result{Err: fmt.Errorf("container: %w (on worker %s)", err, w.id), ExitCode: -1, NotStarted: true}
	}
	var imageID string
	var err error
	a.keepalive(func() {
		if work.Attempt > 0 {
			if prev := containerName(work, work.Attempt-1); cfg.Remove(prev, exa.KillGrace) {
				w.logf("%s: removed container %s, left by attempt %d", id, prev, work.Attempt-1)
			}
		}
		imageID, err = cfg.Resolve(ctx, spec)
	})
	if err != nil {
		return fail(err)
	}
	a.mu.Lock()
	a.imageID = imageID
	a.mu.Unlock()
	box := &container.Attempt{Spec: spec, Name: name, ImageID: imageID, Task: work.Task, Step: work.Step, Retry: work.Attempt,
		Labels: []string{"apollo.worker=" + w.id}, Workspace: w.o.Workdir, Dir: exa.Dir, Pass: exa.Env[c.pass:]}
	res, err := cfg.Run(ctx, w.shell, *exa, box)
	if err != nil {
		return fail(err)
	}
	return res
}
