package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"apollo/engine/container"
	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/eventlog"
)

// containerRun carries a command step's attempts in a container of its
// image (image:), through the engine's CLI run by the local shell
// executor: the container is named from the attempt's tag, so that a timeout,
// a stop or the next run after a crash finds it and removes it.
type containerRun struct{ r *taskRun }

// containerEngine is the engine that runs the pipeline's container steps.
func (r *taskRun) containerEngine() string {
	if e := r.t.p.ContainerEngine; e != "" {
		return e
	}
	if e := r.e.opts.Container.Engine; e != "" {
		return e
	}
	return pipeline.EnginePodman
}

// containerConfig is how this run runs its container steps: the
// machine's engine settings, the pipeline's container.engine first.
func (r *taskRun) containerConfig() container.Config {
	c := r.e.opts.Container
	c.Engine = r.containerEngine()
	return c
}

func (c containerRun) begin(ctx context.Context, at *attemptRun) error {
	r := c.r
	s := at.n.rs.step
	id, ierr := r.containerConfig().Resolve(ctx, s.Container)
	err := r.appendStart(at, func(rec *eventlog.Record) {
		rec.Image, rec.ImageID = s.Container.Image, id
	})
	if err == nil && ierr != nil && at.lateErr == nil {
		at.lateErr = fmt.Errorf("container: %w", ierr)
	}
	at.imageID = id
	return err
}

func (c containerRun) carry(ctx context.Context, at *attemptRun) (executor.Result, error) {
	r := c.r
	s := at.n.rs.step
	ws, dir := r.e.opts.Workdir, at.a.Dir
	box := &container.Attempt{Spec: s.Container, Name: containerName(executor.AttemptToken(r.absLog, s.ID, at.retry)),
		ImageID: at.imageID, Task: r.t.id, Step: s.ID, Retry: at.retry, Workspace: ws, Dir: dir,
		Pass: at.a.Env[len(r.baseEnv):]}
	actx, cancel := executor.WithTimeout(ctx, s.Timeout)
	res, err := r.containerConfig().Run(actx, r.e.opts.Executors["shell"], *at.a, box)
	cancel()
	if err != nil {
		return r.notStarted(at, err)
	}
	return r.bodyEnded(res)
}

// containerName is the name of the container of the local attempt whose
// tag is token (executor.AttemptToken).
func containerName(token string) string { return container.Name(token) }

// containerPlan is what a dry run shows of a container step: the engine's
// command line as an attempt runs it, the attempt's own names and paths
// left as placeholders, the body (shown on its own) as <command>. Secrets
// are passed by name only: none shows here.
func (r *taskRun) containerPlan(rs *renderedStep) string {
	s := rs.step
	c := s.Container
	argv := append([]string{r.containerEngine()}, r.e.opts.Container.Flags...)
	argv = append(argv, "run", "--rm", "--name", "apollo-<attempt>", "--pull", "never",
		"--label", "apollo.task="+r.t.id, "--label", "apollo.step="+s.ID, "--label", "apollo.attempt=<n>")
	argv = append(argv, r.e.opts.Container.RunFlags...)
	ws, _ := filepath.Abs(r.e.opts.Workdir)
	argv = append(argv, "-v", ws+":"+ws+":rw", "-v", "<outputs>:<outputs>:rw")
	for _, m := range c.Mounts {
		argv = append(argv, "-v", container.MountSpec(m))
	}
	dir, _ := filepath.Abs(r.stepDir(s))
	argv = append(argv, "-w", dir)
	names := []string{"APOLLO_TASK_ID", "APOLLO_STEP_ID", "APOLLO_RETRY_COUNT", "APOLLO_OUTPUT"}
	names = append(names, slices.Sorted(maps.Keys(rs.env))...)
	for _, sec := range r.t.p.Secrets {
		names = append(names, sec.Name)
	}
	for _, k := range names {
		argv = append(argv, "-e", k)
	}
	argv = append(argv, container.Options(c)...)
	argv = append(argv, c.Image, "sh", "-c")
	return container.ShellJoin(argv) + " <command>"
}

// endLeftovers ends and removes the container a previous attempt of n
// left (a crash, a timeout the engine outlived), before its cleanup and its
// rerun, and names it ("" when there was none).
func (c containerRun) endLeftovers(n *node) string {
	name := containerName(n.prevToken)
	if c.r.containerConfig().Remove(name, c.r.e.opts.KillGrace) {
		return "container " + name
	}
	return ""
}

// containerDigestText is what the definition digest holds of a container
// step: its image as written and every setting (the id the image resolves
// to is in each STEP_START).
func containerDigestText(c *pipeline.Container) string {
	b, _ := json.Marshal(c)
	return string(b)
}
