package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/spf13/pflag"

	"apollo/engine/container"
	"apollo/engine/remote"
	"apollo/engine/usage"
	"apollo/engine/worker"
	"apollo/scripts"
)

func workerCommand() *command[*workerOptions] {
	return &command[*workerOptions]{
		about: about{name: "worker", exitCodes: workerExitCodes, summary: "run the steps a hub dispatches to a pool (scale-out)",
			usage: "apollo worker --hub URL[,URL...] [--pool P] [--slots N] [--container-engine podman|docker] [--state-dir DIR]",
			example: "  apollo worker --hub nats://127.0.0.1:4222\n" +
				"  apollo worker --hub nats://10.0.0.1:4222,nats://10.0.0.2:4222 --pool gpu --slots 2 --token-file hub.token\n" +
				"  apollo worker --hub nats://127.0.0.1:4222 --container-engine podman   # also runs image: steps\n" +
				"  Ctrl-C: take no new attempt and let the running ones finish; a second Ctrl-C ends them (reported interrupted)"},
		nargs: positional{0, 0, "takes no arguments"},
		flags: newWorkerOptions,
		run:   runWorker,
	}
}

// workerOptions are the flags of apollo worker.
type workerOptions struct {
	hub      hubFlags
	pool     string
	slots    int
	engine   string
	stateDir string
}

// newWorkerOptions returns apollo worker's options, bound to the flags it adds to fs.
func newWorkerOptions(fs *pflag.FlagSet) *workerOptions {
	o := new(workerOptions)
	o.hub.addFlags(fs, "the hub to pull attempts from: nats://host:port[,nats://host:port...] (required)")
	fs.StringVar(&o.pool, "pool", remote.DefaultPool, "the pool whose attempts to run")
	fs.IntVar(&o.slots, "slots", runtime.NumCPU(), "most attempts running at once")
	fs.StringVar(&o.engine, "container-engine", "", "run the pool's container steps (image:) too, with this engine: podman, docker, or the path of one's binary "+
		"(env APOLLO_CONTAINER_FLAGS and APOLLO_CONTAINER_RUN_FLAGS add its flags); without it, the worker takes none")
	stateDirFlag(fs, &o.stateDir)
	return o
}

// runWorker pulls and runs attempts until Ctrl-C (drain) or a second
// Ctrl-C (end the running attempts).
func runWorker(ctx context.Context, o *workerOptions, in invocation) error {
	if o.hub.urls == "" {
		return &usage.Error{Msg: "worker: --hub is required: the hub's URL, nats://host:port"}
	}
	if !remote.ValidPool(o.pool) {
		return &usage.Error{Msg: fmt.Sprintf("worker: --pool %q: a pool name is letters, digits, _ and -", o.pool)}
	}
	if o.slots < 1 {
		return &usage.Error{Msg: fmt.Sprintf("worker: --slots %d: must be at least 1", o.slots)}
	}
	var box *container.Config
	if o.engine != "" {
		cfg := containerConfig()
		cfg.Engine = o.engine
		if _, err := exec.LookPath(o.engine); err != nil {
			return &usage.Error{Msg: fmt.Sprintf("worker: --container-engine %s: not installed here (%v): install it, or name podman, docker or the path of its binary", o.engine, err)}
		}
		box = &cfg
	}
	// The first signal cancels ctx (main's): drain. The second ends the
	// running attempts.
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	kill := make(chan struct{})
	go func() {
		<-sigs
		fmt.Fprintln(in.stderr, "apollo worker: draining: no new attempts; the running ones finish (Ctrl-C again ends them)")
		<-sigs
		fmt.Fprintln(in.stderr, "apollo worker: ending the running attempts")
		close(kill)
	}()
	host, _ := os.Hostname()
	c, err := remote.Connect(ctx, remote.Config{URLs: o.hub.urls, Name: fmt.Sprintf("apollo worker %s:%d", host, os.Getpid()),
		Auth: o.hub.auth(), CallTimeout: envDuration(envHubCallTimeout), GiveUp: envDuration(envHubGiveUp)})
	if err != nil {
		return err
	}
	defer c.Close()
	tracer := newTracer(ctx, in.stderr)
	defer tracer.Shutdown()
	w, err := worker.New(ctx, worker.Options{Client: c, Pool: o.pool, Slots: o.slots, Liveness: envDuration(envLiveness),
		StateDir: o.stateDir, Bundled: scripts.Modules(), Log: in.stderr, Container: box, Tracer: tracer})
	if err != nil {
		return err
	}
	st, err := w.Run(ctx, kill)
	if err != nil {
		return err
	}
	fmt.Fprintf(in.stderr, "apollo worker %s: stopped: ran %d attempt(s), reported %d lost, %d ended by the second Ctrl-C and reported interrupted\n",
		w.ID(), st.Ran, st.Lost, st.Interrupted)
	return nil
}

// workerExitCodes is apollo worker's exit code table.
const workerExitCodes = `Exit codes:
  0    the worker stopped on SIGINT or SIGTERM (the first drains, a second ends the running attempts)
  1    the worker could not go on: the hub unreachable past APOLLO_HUB_GIVE_UP, or refused its credentials
  2    a usage error; nothing was started
`
