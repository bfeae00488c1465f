package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"apollo/engine"
	"apollo/engine/cron"
	"apollo/engine/hubview"
	"apollo/engine/listen"
	"apollo/engine/remote"
	"apollo/engine/statedir"
	"apollo/engine/usage"
	"apollo/engine/web"
	"apollo/eventlog"
)

func serveCommand() *command[*serveOptions] {
	return &command[*serveOptions]{
		about: about{name: "serve", exitCodes: serveExitCodes, summary: "watch runs in a browser, run pipelines on their schedules, export metrics",
			usage: "apollo serve [--listen 127.0.0.1:8080] [--state-dir DIR]... [--pipelines DIR] [--token-file FILE | --auth-file FILE] [--allowed-hosts NAME,...]\n" +
				"               [--hub URL[,URL...] [--schedule-group NAME] [--hub-token-file F | --nkey-seed F | --tls-cert F --tls-key F] [--tls-ca F]]",
			example: "  apollo serve --pipelines pipelines/\n" +
				"  apollo serve --pipelines pipelines/ --hub nats://h1:4222,nats://h2:4222,nats://h3:4222   # on two hosts or more: one leads the schedules\n" +
				"  apollo serve --hub nats://h1:4222   # every task whose log is in the hub, no state folder needed\n" +
				"  apollo serve --listen 0.0.0.0:8080 --auth-file /etc/apollo/users --state-dir /srv/a --state-dir /srv/b\n" +
				"  # users: one user:bcrypt-hash a line, as htpasswd -nB USER prints it"},
		nargs: positional{0, 0, "takes no arguments"},
		flags: newServeOptions,
		run:   runServe,
	}
}

// serveOptions are the flags of apollo serve.
type serveOptions struct {
	listen    string
	stateDirs []string
	pipelines string
	tokenFile string
	authFile  string
	hosts     []string
	hub       hubFlags
	group     string
}

// newServeOptions returns apollo serve's options, bound to the flags it adds to fs.
func newServeOptions(fs *pflag.FlagSet) *serveOptions {
	o := new(serveOptions)
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to listen on; any but loopback needs --token-file or --auth-file")
	fs.StringArrayVar(&o.stateDirs, "state-dir", nil, "a state folder to show (repeatable; the first gets scheduled runs) (default $APOLLO_HOME, else .apollo)")
	fs.StringVar(&o.pipelines, "pipelines", "", "folder of pipeline files to show and run on their schedules")
	fs.StringVar(&o.tokenFile, "token-file", "", "file holding the token that signs users in (at least 16 characters)")
	fs.StringVar(&o.authFile, "auth-file", "", "basic-auth users: one user:bcrypt-hash a line (htpasswd -nB USER)")
	fs.StringSliceVar(&o.hosts, "allowed-hosts", nil, "with sign-in, the only Host names answered besides loopback ones (name or name:port, comma-separated)")
	o.hub.addFlagsAs(fs, "show every task whose log is in this hub, and share the schedules with its other serves (one leads, runs go through the hub): nats://host:port[,...]",
		"hub-token-file")
	fs.StringVar(&o.group, "schedule-group", "default", "with --hub: the name the serves sharing one pipelines folder's schedules give (letters, digits, _ and -)")
	return o
}

// selfExe is the apollo binary that runs started from the page run: this
// one, by the name it was started with.
func selfExe() string {
	exe := os.Args[0]
	if !strings.ContainsRune(exe, filepath.Separator) {
		if p, err := exec.LookPath(exe); err == nil {
			exe = p
		}
	}
	if abs, err := filepath.Abs(exe); err == nil {
		return abs
	}
	return exe
}

// runServe serves until SIGINT or SIGTERM. Runs it started go on in their
// own process groups; the next serve takes them up.
func runServe(ctx context.Context, o *serveOptions, in invocation) error {
	dirs := o.stateDirs
	// serve --hub alone shows the hub's tasks and needs no state folder;
	// schedules (--pipelines) need one.
	hubOnly := o.hub.urls != "" && len(dirs) == 0 && o.pipelines == ""
	if len(dirs) == 0 && !hubOnly {
		dirs = []string{stateDirDefault()}
	}
	for _, d := range dirs {
		if d == "" {
			return &usage.Error{Msg: "serve: --state-dir is empty; give a value or leave the flag out"}
		}
	}
	if o.pipelines != "" {
		if fi, err := os.Stat(o.pipelines); err != nil || !fi.IsDir() {
			return &usage.Error{Msg: fmt.Sprintf("serve: --pipelines %s is not a folder", o.pipelines)}
		}
	}
	auth := &web.Auth{}
	var err error
	if o.tokenFile != "" {
		if auth.Token, err = web.LoadToken(o.tokenFile); err != nil {
			return &usage.Error{Msg: "serve: " + err.Error()}
		}
	}
	if o.authFile != "" {
		if auth.Users, err = web.LoadUsers(o.authFile); err != nil {
			return &usage.Error{Msg: "serve: " + err.Error()}
		}
	}
	if len(o.hosts) > 0 && !auth.Enabled() {
		return &usage.Error{Msg: "serve: --allowed-hosts needs --token-file or --auth-file: without sign-in, serve answers only " +
			"loopback names (127.0.0.1, [::1], localhost), so that a web page rebinding its name to this machine reads nothing"}
	}
	for _, h := range o.hosts {
		if err := web.ValidAllowedHost(h); err != nil {
			return &usage.Error{Msg: "serve: --allowed-hosts " + err.Error()}
		}
	}
	if o.hub.urls == "" && (o.hub.tokenFile != "" || o.hub.nkeySeed != "" || o.hub.tlsCA != "" || o.hub.tlsCert != "" || o.hub.tlsKey != "" ||
		o.group != "default") {
		return &usage.Error{Msg: "serve: --hub-token-file, --nkey-seed, --tls-ca, --tls-cert, --tls-key and --schedule-group go with --hub"}
	}
	if o.hub.urls != "" && !remote.ValidPool(o.group) {
		return &usage.Error{Msg: fmt.Sprintf("serve: --schedule-group %q: use letters, digits, '_' and '-'", o.group)}
	}
	if !listen.Loopback(o.listen) && !auth.Enabled() {
		return &usage.Error{Msg: fmt.Sprintf("serve: --listen %s is not a loopback address: anyone who reaches it would see every log; "+
			"give --token-file or --auth-file, or listen on 127.0.0.1", o.listen)}
	}
	logf := func(format string, args ...any) { fmt.Fprintf(in.stderr, format+"\n", args...) }
	readOnly := make([]string, len(dirs))
	for i, d := range dirs {
		if readOnly[i] = readOnlyDir(d); readOnly[i] != "" {
			fmt.Fprintf(in.stderr, "apollo serve: the state folder %s is read-only (%s): its runs are shown read-only, "+
				"without interventions%s\n", d, readOnly[i], map[bool]string{true: ", schedules or runs from the page", false: ""}[i == 0])
		}
	}
	wd, _ := os.Getwd()
	noSched := ""
	var sched *cron.Scheduler
	host, _ := os.Hostname()
	var view *web.HubFolder
	if o.hub.urls != "" {
		hv, stop, err := hubView(ctx, o, host, logf)
		if err != nil {
			return err
		}
		defer stop()
		view = hv
	}
	var copts cron.Options
	if !hubOnly {
		copts = cron.Options{StateDir: dirs[0], Launch: cron.ExecLauncher(selfExe(), wd), Logf: logf}
	}
	if o.hub.urls != "" && !hubOnly && readOnly[0] == "" {
		c, err := sharedSchedules(ctx, o, &copts, host, wd)
		if err != nil {
			return err
		}
		defer c.Close()
	}
	if hubOnly {
		noSched = "this serve shows the hub's tasks and has no state folder of its own (give --state-dir and --pipelines for schedules " +
			"and runs from the page)"
	} else if readOnly[0] != "" {
		noSched = fmt.Sprintf("the state folder %s is read-only (%s): schedules and runs from the page are off here", dirs[0], readOnly[0])
	} else if sched, err = cron.New(copts); err != nil {
		if _, ok := errors.AsType[*cron.LockedError](err); !ok {
			return err
		}
		noSched = err.Error() + "; schedules and runs from the page are off here"
		fmt.Fprintf(in.stderr, "apollo serve: %s\n", noSched)
		sched = nil
	}
	if sched != nil {
		defer sched.Close()
	}
	srv, err := web.New(web.Options{StateDirs: dirs, Pipelines: o.pipelines, Auth: auth, Scheduler: sched,
		NoScheduler: noSched, Version: version(), Logf: logf, Host: host, AllowedHosts: o.hosts, ReadOnly: readOnly, Hub: view})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	defer srv.Close()
	shown := strings.Join(dirs, ", ")
	if view != nil {
		shown = strings.Join(append(slices.Clone(dirs), view.Label), ", ")
	}
	fmt.Fprintf(in.stderr, "apollo serve: http://%s/ (state folders: %s; pipelines: %s; sign-in: %s)\n",
		ln.Addr(), shown, orNone(o.pipelines), srv.DescribeAuth())
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if hs.Shutdown(shut) != nil {
		hs.Close() // live pages hold their connections open
	}
	fmt.Fprintln(in.stderr, "apollo serve: stopped; runs it started go on")
	return nil
}

// sharedSchedules connects to the hub of serve --hub and sets copts to
// share the schedules of the group there: the lead, the schedule log in the
// hub, runs through the hub, and a task held by a coordinator anywhere
// counted as running (docs/spec.md §8.9).
func sharedSchedules(ctx context.Context, o *serveOptions, copts *cron.Options, host, wd string) (*remote.Client, error) {
	c, err := remote.Connect(ctx, remote.Config{URLs: o.hub.urls, Name: "apollo serve " + host, Auth: o.hub.auth(),
		CallTimeout: envDuration(envHubCallTimeout), GiveUp: envDuration(envHubGiveUp),
		Waiting: func(what string, waited time.Duration, cause error) {
			fmt.Fprintf(os.Stderr, "apollo serve: waiting for the hub: no answer to %q for %s (%v); still trying\n", what, waited.Round(time.Second), cause)
		}})
	if err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if err := c.Ensure(ctx, c.ClusterSize(), false); err != nil {
		c.Close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	ttl := envDuration(envHubLeaseTTL)
	if ttl == 0 {
		ttl = engine.DefaultLeaseTTL
	}
	abs, _ := filepath.Abs(copts.StateDir)
	sh, err := c.NewSchedules(ctx, o.group, remote.Holder{Host: host, PID: os.Getpid(), StateDir: abs, Since: time.Now()}, ttl)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	copts.Shared = sh
	copts.Me = fmt.Sprintf("apollo serve process %d on host %s (state folder %s)", os.Getpid(), host, abs)
	copts.Launch = cron.ExecLauncher(selfExe(), wd, o.hub.runArgs()...)
	copts.Holder = func(stateDir, taskID string) (int, bool) {
		if pid, held := eventlog.Holder(statedir.Dir{Root: stateDir}.Lock(taskID)); held {
			return pid, true
		}
		hctx, cancel := context.WithTimeout(ctx, c.Config().CallTimeout)
		defer cancel()
		h, held, err := c.TaskHolder(hctx, taskID)
		if err != nil {
			return 0, true // unknown: wait, rather than start a task that may run elsewhere
		}
		return h.PID, held
	}
	return c, nil
}

// hubView connects to the hub of serve --hub and keeps a copy of every
// task's log it holds in a temporary folder, for the pages to show as one
// more state folder (docs/spec.md §8.8). stop ends the copy and removes
// the folder.
func hubView(ctx context.Context, o *serveOptions, host string, logf func(string, ...any)) (*web.HubFolder, func(), error) {
	c, err := remote.Connect(ctx, remote.Config{URLs: o.hub.urls, Name: "apollo serve view " + host, Auth: o.hub.auth(),
		CallTimeout: envDuration(envHubCallTimeout), GiveUp: envDuration(envHubGiveUp)})
	if err != nil {
		return nil, nil, fmt.Errorf("serve: %w", err)
	}
	if err := c.Ensure(ctx, c.ClusterSize(), false); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("serve: %w", err)
	}
	dir, err := os.MkdirTemp("", "apollo-serve-hub-")
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("serve: %w", err)
	}
	m := hubview.New(c, dir, logf)
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := m.Run(mctx); err != nil {
			logf("apollo serve: the copy of the hub's logs stopped: %v", err)
		}
	}()
	// The first page lists what the hub held at the start (bounded: the
	// rest comes in as it is read).
	select {
	case <-m.Ready():
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	stop := func() {
		cancel()
		<-done
		c.Close()
		os.RemoveAll(dir)
	}
	return &web.HubFolder{Dir: dir, Label: "hub " + o.hub.urls, Holder: m.Holder}, stop, nil
}

// readOnlyDir says why state folder dir cannot be written (a read-only
// mount, a folder the user may not write), "" when it can or does not
// exist yet.
func readOnlyDir(dir string) string {
	err := syscall.Access(dir, 2) // W_OK; EROFS on a read-only mount, for root too
	if err == nil || !engine.ReadOnly(err) {
		return ""
	}
	if errors.Is(err, syscall.EROFS) {
		return "a read-only file system"
	}
	return "not writable by this user"
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// serveExitCodes is apollo serve's exit code table.
const serveExitCodes = `Exit codes:
  0    stopped on SIGINT or SIGTERM (runs it started go on; the next serve takes them up)
  1    serve could not start or go on (an address in use, an unreadable state folder)
  2    a usage error (a listen address that is not loopback without credentials, say); nothing was started
`
