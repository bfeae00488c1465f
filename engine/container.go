package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/engine/usage"
	"apollo/eventlog"
)

// ContainerConfig is how this machine runs image: steps (docs/spec.md
// §2.12), from APOLLO_CONTAINER_ENGINE, APOLLO_CONTAINER_FLAGS and
// APOLLO_CONTAINER_RUN_FLAGS.
type ContainerConfig struct {
	// Engine is "podman" or "docker" (or the path of one's binary); "" is
	// podman. A pipeline's container.engine takes precedence.
	Engine string
	// Flags go before the engine's subcommand (podman --runtime runc ...),
	// RunFlags after `run` (--ulimit nofile=1024:1024 ...): what a machine's
	// engine needs to start containers at all.
	Flags, RunFlags []string
}

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

// containerName is the name of the container of the attempt whose tag is
// token (executor.AttemptToken): the same in every run, so that a later
// run finds what a crash left.
func containerName(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "apollo-" + hex.EncodeToString(sum[:10])
}

// engineCmd runs the engine's CLI with args, bounded by ctx, and returns
// its trimmed stdout, or an error holding its stderr.
func (r *taskRun) engineCmd(ctx context.Context, args ...string) (string, error) {
	eng := r.containerEngine()
	bin, err := exec.LookPath(eng)
	if err != nil {
		return "", fmt.Errorf("container engine %s is not installed (%v): install it, or choose the other "+
			"engine with container: {engine: ...} or APOLLO_CONTAINER_ENGINE", eng, err)
	}
	cmd := exec.CommandContext(ctx, bin, append(append([]string(nil), r.e.opts.Container.Flags...), args...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if len(msg) > 400 {
			msg = msg[:400] + "..."
		}
		return "", fmt.Errorf("%s %s: %w: %s", eng, args[0], err, msg)
	}
	return strings.TrimSpace(out.String()), nil
}

// resolveImage makes the step's image present as its pull: says and
// returns its id, so that the STEP_START says exactly what runs.
func (r *taskRun) resolveImage(ctx context.Context, c *pipeline.Container) (string, error) {
	eng := r.containerEngine()
	inspect := func() (string, error) { return r.engineCmd(ctx, "image", "inspect", "--format", "{{.Id}}", c.Image) }
	if c.Pull == "always" {
		if _, err := r.engineCmd(ctx, "pull", c.Image); err != nil {
			return "", fmt.Errorf("pull: always: %w", err)
		}
	}
	id, err := inspect()
	if err == nil {
		return normalID(id), nil
	}
	if _, look := exec.LookPath(eng); look != nil {
		return "", err
	}
	if c.Pull == "never" {
		return "", fmt.Errorf("image %s is not on this machine and pull is never: pull or build it first (%s pull %s), or set pull: missing",
			c.Image, eng, c.Image)
	}
	if _, err := r.engineCmd(ctx, "pull", c.Image); err != nil {
		return "", fmt.Errorf("image %s is not on this machine and could not be pulled: %w", c.Image, err)
	}
	id, err = inspect()
	if err != nil {
		return "", err
	}
	return normalID(id), nil
}

func normalID(id string) string {
	if !strings.HasPrefix(id, "sha256:") {
		id = "sha256:" + id
	}
	return id
}

func (c containerRun) begin(ctx context.Context, at *attemptRun) error {
	r := c.r
	s := at.n.rs.step
	id, ierr := r.resolveImage(ctx, s.Container)
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
	a := *at.a
	token := executor.AttemptToken(r.absLog, s.ID, at.retry)
	name := containerName(token)
	argv, err := r.containerArgv(&a, at.imageID, name, at.retry)
	if err != nil {
		return r.notStarted(at, err)
	}
	a.Command = "exec " + shellJoin(argv)
	actx, cancel := executor.WithTimeout(ctx, s.Timeout)
	bodyDone, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		// A timeout or a stop ends the container itself: the engine's
		// client, which the executor signals, is not the container.
		defer close(stopped)
		select {
		case <-actx.Done():
			r.removeContainer(name, r.e.opts.KillGrace)
		case <-bodyDone:
		}
	}()
	res := r.e.opts.Executors["shell"].Run(actx, &a)
	close(bodyDone)
	<-stopped
	cancel()
	if res, err := r.bodyEnded(res); err != nil {
		return res, err
	}
	if res.ExitCode == 125 && !res.TimedOut && !res.Interrupted {
		eng := r.containerEngine()
		res.Err = fmt.Errorf("container engine %s could not run the container (exit 125): %s; check that the engine works (%s info) "+
			"and that the image %s runs here (APOLLO_CONTAINER_RUN_FLAGS gives the engine flags it may need)",
			eng, engineMessage(a.OutputPath), eng, s.Container.Image)
	}
	return res, nil
}

// containerArgv is the engine's command line that runs a's body in its
// container: the workspace mounted at its own path, the step's
// environment passed by name only (the engine reads the values from its
// own environment: no value shows in ps).
func (r *taskRun) containerArgv(a *executor.Attempt, imageID, name string, retry int) ([]string, error) {
	s := a.Step
	c := s.Container
	eng := r.containerEngine()
	bin, err := exec.LookPath(eng)
	if err != nil {
		_, err = r.engineCmd(context.Background(), "version")
		return nil, err
	}
	argv := append([]string{bin}, r.e.opts.Container.Flags...)
	argv = append(argv, "run", "--rm", "--name", name, "--pull", "never",
		"--label", "apollo.task="+r.t.id, "--label", "apollo.step="+s.ID, "--label", "apollo.attempt="+strconv.Itoa(retry))
	argv = append(argv, r.e.opts.Container.RunFlags...)
	mounted := map[string]bool{}
	mount := func(src, dst string, rw bool) {
		if mounted[dst] {
			return
		}
		mounted[dst] = true
		opt := ":ro"
		if rw {
			opt = ":rw"
		}
		argv = append(argv, "-v", src+":"+dst+opt)
	}
	ws, err := filepath.Abs(r.e.opts.Workdir)
	if err != nil {
		return nil, fmt.Errorf("container: the workspace: %w", err)
	}
	dir, err := filepath.Abs(a.Dir)
	if err != nil {
		return nil, fmt.Errorf("container: the working directory: %w", err)
	}
	mount(ws, ws, true)
	if !within(ws, dir) {
		mount(dir, dir, true)
	}
	if a.PublishPath != "" {
		// $APOLLO_OUTPUT, at the same absolute path inside.
		pub, err := filepath.Abs(a.PublishPath)
		if err != nil {
			return nil, fmt.Errorf("container: $APOLLO_OUTPUT: %w", err)
		}
		mount(filepath.Dir(pub), filepath.Dir(pub), true)
		a.Env = append(a.Env[:len(a.Env):len(a.Env)], "APOLLO_OUTPUT="+pub)
	}
	for _, m := range c.Mounts {
		if _, err := os.Stat(m.Source); err != nil {
			return nil, fmt.Errorf("container: mount %s: %w", m.Source, err)
		}
		if !mounted[m.Target] {
			mounted[m.Target] = true
			argv = append(argv, "-v", mountSpec(m))
		}
	}
	argv = append(argv, "-w", dir)
	for _, kv := range a.Env[len(r.baseEnv):] {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" {
			argv = append(argv, "-e", k)
		}
	}
	argv = append(argv, containerOptions(c)...)
	ref := imageID
	if ref == "" {
		ref = c.Image
	}
	return append(argv, ref, "sh", "-c", a.Command), nil
}

// containerOptions are the engine's flags for the step's settings.
func containerOptions(c *pipeline.Container) []string {
	var argv []string
	if c.User != "" {
		argv = append(argv, "--user", c.User)
	}
	if c.CPUs != "" {
		argv = append(argv, "--cpus", c.CPUs)
	}
	if c.Memory != "" {
		argv = append(argv, "--memory", c.Memory)
	}
	if c.Network != "" {
		argv = append(argv, "--network", map[string]string{"none": "none", "host": "host", "default": "bridge"}[c.Network])
	}
	return argv
}

func mountSpec(m pipeline.Mount) string {
	if m.Writable {
		return m.Source + ":" + m.Target + ":rw"
	}
	return m.Source + ":" + m.Target + ":ro"
}

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
		argv = append(argv, "-v", mountSpec(m))
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
	argv = append(argv, containerOptions(c)...)
	argv = append(argv, c.Image, "sh", "-c")
	return shellJoin(argv) + " <command>"
}

// within reports whether path is dir or under it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// removeContainer ends and removes a container by name (stop with grace,
// then kill), and reports whether there was one.
func (r *taskRun) removeContainer(name string, grace time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	ids, err := r.engineCmd(ctx, "ps", "-aq", "--filter", "name=^"+name+"$")
	if err != nil || ids == "" {
		return false
	}
	secs := strconv.Itoa(max(int(grace/time.Second), 1))
	_, _ = r.engineCmd(ctx, "stop", "-t", secs, name)
	_, _ = r.engineCmd(ctx, "rm", "-f", name)
	return true
}

// endLeftovers ends and removes the container a previous attempt of n
// left (a crash, a timeout the engine outlived), before its cleanup and its
// rerun, and names it ("" when there was none).
func (c containerRun) endLeftovers(n *node) string {
	name := containerName(n.prevToken)
	if c.r.removeContainer(name, c.r.e.opts.KillGrace) {
		return "container " + name
	}
	return ""
}

// engineMessage is the engine's error in an attempt's output file: its
// last line starting with "Error:" (podman, docker), bounded.
func engineMessage(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "its message is in the step's output"
	}
	msg := "its message is in the step's output"
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Error:") || strings.HasPrefix(l, "Error response from daemon:") {
			msg = strings.TrimSpace(l)
		}
	}
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}

// shellJoin quotes argv for sh, each word that needs it.
func shellJoin(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = a
		if a == "" || strings.ContainsFunc(a, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-_./:=@,+%", c))
		}) {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// containerDigestText is what the definition digest holds of a container
// step: its image as written and every setting (the id the image resolves
// to is in each STEP_START).
func containerDigestText(c *pipeline.Container) string {
	b, _ := json.Marshal(c)
	return string(b)
}

// refuseContainersOnHub refuses a run with a hub of a pipeline with
// container steps: a worker would run their bodies on its host instead of
// in their image, and no worker says yet which engine it has.
func refuseContainersOnHub(p *pipeline.Pipeline) error {
	for _, s := range p.Steps {
		if s.Container != nil {
			return usage.Errorf("%s: step %q runs in a container (image: %s), which workers do not run yet; run it without --hub",
				p.Path, s.ID, s.Container.Image)
		}
	}
	return nil
}
