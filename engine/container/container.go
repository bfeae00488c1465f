package container

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
)

// Config is how a machine runs image: steps: from APOLLO_CONTAINER_ENGINE,
// APOLLO_CONTAINER_FLAGS and APOLLO_CONTAINER_RUN_FLAGS, or apollo worker's
// --container-engine.
type Config struct {
	// Engine is "podman" or "docker" (or the path of one's binary); "" is
	// podman.
	Engine string `json:"engine,omitempty"`
	// Flags go before the engine's subcommand (podman --runtime runc ...),
	// RunFlags after `run` (--ulimit nofile=1024:1024 ...): what a machine's
	// engine needs to start containers at all.
	Flags    []string `json:"flags,omitempty"`
	RunFlags []string `json:"run_flags,omitempty"`
}

// EngineName is the engine c runs: its Engine, else podman.
func (c Config) EngineName() string {
	if c.Engine == "" {
		return pipeline.EnginePodman
	}
	return c.Engine
}

// Name is the name of the container of the attempt whose tag is token:
// the same wherever and whenever it is computed, so that a timeout, a stop
// or the next attempt after a crash finds what the attempt left.
func Name(token string) string {
	sum := sha256.Sum256([]byte(token))
	return "apollo-" + hex.EncodeToString(sum[:10])
}

// Cmd runs the engine's CLI with args, bounded by ctx, and returns its
// trimmed stdout, or an error holding its stderr.
func (c Config) Cmd(ctx context.Context, args ...string) (string, error) {
	eng := c.EngineName()
	bin, err := exec.LookPath(eng)
	if err != nil {
		return "", fmt.Errorf("container engine %s is not installed (%v): install it, or choose the other "+
			"engine with container: {engine: ...} or APOLLO_CONTAINER_ENGINE", eng, err)
	}
	cmd := exec.CommandContext(ctx, bin, append(append([]string(nil), c.Flags...), args...)...)
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

// Resolve makes the image of spec present as its pull: says and returns
// its id, so that the attempt's start says exactly what runs.
func (c Config) Resolve(ctx context.Context, spec *pipeline.Container) (string, error) {
	eng := c.EngineName()
	inspect := func() (string, error) { return c.Cmd(ctx, "image", "inspect", "--format", "{{.Id}}", spec.Image) }
	if spec.Pull == "always" {
		if _, err := c.Cmd(ctx, "pull", spec.Image); err != nil {
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
	if spec.Pull == "never" {
		return "", fmt.Errorf("image %s is not on this machine and pull is never: pull or build it first (%s pull %s), or set pull: missing",
			spec.Image, eng, spec.Image)
	}
	if _, err := c.Cmd(ctx, "pull", spec.Image); err != nil {
		return "", fmt.Errorf("image %s is not on this machine and could not be pulled: %w", spec.Image, err)
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

// Attempt is what one attempt's container is made of.
type Attempt struct {
	// Spec is the step's image: settings.
	Spec *pipeline.Container
	// Name is the container's name (Name of the attempt's tag).
	Name string
	// ImageID is what Resolve returned; "" runs Spec.Image as written.
	ImageID string
	// Task, Step and Retry label the container (apollo.task, apollo.step,
	// apollo.attempt); Labels are more key=value labels.
	Task, Step string
	Retry      int
	Labels     []string
	// Workspace is mounted read-write at its own path; Dir is the working
	// directory, mounted too when it is outside the workspace.
	Workspace, Dir string
	// Pass are the KEY=VALUE variables of the body's environment that the
	// container gets: by name only, the engine reading the values from its
	// own environment, so that no value shows in ps.
	Pass []string
}

// Argv is the engine's command line that runs a's body, whose
// $APOLLO_OUTPUT is publish ("" for none), in its container: the workspace
// mounted at its own path, the folder of $APOLLO_OUTPUT too, the
// environment passed by name.
func (c Config) Argv(at *Attempt, publish, body string) ([]string, error) {
	spec := at.Spec
	bin, err := exec.LookPath(c.EngineName())
	if err != nil {
		_, err = c.Cmd(context.Background(), "version")
		return nil, err
	}
	argv := append([]string{bin}, c.Flags...)
	argv = append(argv, "run", "--rm", "--name", at.Name, "--pull", "never",
		"--label", "apollo.task="+at.Task, "--label", "apollo.step="+at.Step, "--label", "apollo.attempt="+strconv.Itoa(at.Retry))
	for _, l := range at.Labels {
		argv = append(argv, "--label", l)
	}
	argv = append(argv, c.RunFlags...)
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
	ws, err := filepath.Abs(at.Workspace)
	if err != nil {
		return nil, fmt.Errorf("container: the workspace: %w", err)
	}
	dir, err := filepath.Abs(at.Dir)
	if err != nil {
		return nil, fmt.Errorf("container: the working directory: %w", err)
	}
	mount(ws, ws, true)
	if !within(ws, dir) {
		mount(dir, dir, true)
	}
	if publish != "" {
		mount(filepath.Dir(publish), filepath.Dir(publish), true)
	}
	for _, m := range spec.Mounts {
		if _, err := os.Stat(m.Source); err != nil {
			return nil, fmt.Errorf("container: mount %s: %w", m.Source, err)
		}
		if !mounted[m.Target] {
			mounted[m.Target] = true
			argv = append(argv, "-v", MountSpec(m))
		}
	}
	argv = append(argv, "-w", dir)
	seen := map[string]bool{}
	for _, kv := range at.Pass {
		if k, _, ok := strings.Cut(kv, "="); ok && k != "" && !seen[k] {
			seen[k] = true
			argv = append(argv, "-e", k)
		}
	}
	if publish != "" && !seen["APOLLO_OUTPUT"] {
		argv = append(argv, "-e", "APOLLO_OUTPUT")
	}
	argv = append(argv, Options(spec)...)
	ref := at.ImageID
	if ref == "" {
		ref = spec.Image
	}
	return append(argv, ref, "sh", "-c", body), nil
}

// Run runs a's body in at's container through shell, the shell executor,
// as `exec <engine> run ...`: the engine's client is the attempt's process,
// the container's output its output, the body's exit code its exit code.
// A timeout or a stop (ctx ends) ends the container itself, through its
// engine: the client, which the executor signals, is not the container. An
// engine that could not run the container (exit 125) fails the attempt
// with its message. The error, when the command line cannot be made (no
// engine, a mount's source missing), means nothing ran.
func (c Config) Run(ctx context.Context, shell executor.Executor, a executor.Attempt, at *Attempt) (executor.Result, error) {
	publish := ""
	if a.PublishPath != "" {
		// $APOLLO_OUTPUT, at the same absolute path inside.
		pub, err := filepath.Abs(a.PublishPath)
		if err != nil {
			return executor.Result{}, fmt.Errorf("container: $APOLLO_OUTPUT: %w", err)
		}
		publish = pub
		a.Env = append(a.Env[:len(a.Env):len(a.Env)], "APOLLO_OUTPUT="+pub)
	}
	argv, err := c.Argv(at, publish, a.Command)
	if err != nil {
		return executor.Result{}, err
	}
	a.Command = "exec " + ShellJoin(argv)
	bodyDone, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-ctx.Done():
			c.Remove(at.Name, a.KillGrace)
		case <-bodyDone:
		}
	}()
	res := shell.Run(ctx, &a)
	close(bodyDone)
	<-stopped
	if res.ExitCode == 125 && !res.TimedOut && !res.Interrupted && !res.NotStarted {
		eng := c.EngineName()
		res.Err = fmt.Errorf("container engine %s could not run the container (exit 125): %s; check that the engine works (%s info) "+
			"and that the image %s runs here (APOLLO_CONTAINER_RUN_FLAGS gives the engine flags it may need)",
			eng, engineMessage(a.OutputPath), eng, at.Spec.Image)
	}
	return res, nil
}

// Options are the engine's flags for the step's settings.
func Options(c *pipeline.Container) []string {
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

// MountSpec is the engine's -v value of a mount.
func MountSpec(m pipeline.Mount) string {
	if m.Writable {
		return m.Source + ":" + m.Target + ":rw"
	}
	return m.Source + ":" + m.Target + ":ro"
}

// within reports whether path is dir or under it.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// Remove ends and removes a container by name (stop with grace, then
// kill), and reports whether there was one.
func (c Config) Remove(name string, grace time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), grace+30*time.Second)
	defer cancel()
	ids, err := c.Cmd(ctx, "ps", "-aq", "--filter", "name=^"+name+"$")
	if err != nil || ids == "" {
		return false
	}
	secs := strconv.Itoa(max(int(grace/time.Second), 1))
	_, _ = c.Cmd(ctx, "stop", "-t", secs, name)
	_, _ = c.Cmd(ctx, "rm", "-f", name)
	return true
}

// engineMessage is the engine's error in an attempt's output file: its
// last line starting with "Error:" (podman, docker), bounded.
func engineMessage(path string) string {
	msg := "its message is in the step's output"
	b, err := os.ReadFile(path)
	if err != nil {
		return msg
	}
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

// ShellJoin quotes argv for sh, each word that needs it.
func ShellJoin(argv []string) string {
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
