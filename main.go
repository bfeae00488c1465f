// Command apollo runs long, many-step jobs as resumable DAGs over a plain
// JSON Lines event log. See README.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"apollo/engine"
	"apollo/eventlog"
	"apollo/scripts"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes (SPEC §7).
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitLocked      = 3
	exitInterrupted = 130
)

const exitCodeTable = `Exit codes:
  0    the task succeeded (failed optional steps are reported, not fatal)
  1    the task failed, or could not go on (a damaged log, a disk error)
  2    a usage or pipeline error, or an unknown task id; nothing was run or written
  3    the task is already being run by another apollo process (its pid is named)
  130  interrupted by SIGINT or SIGTERM; run the same command to resume
`

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string
	example string
	// json documents the command's --json output, shown by --help.
	json string
	// args is what the positional arguments are (engine.Arg*), and flags
	// registers the command's flags: both for shell completion.
	args  string
	flags func(fs *pflag.FlagSet)
	run   func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []*command {
	return []*command{
		{name: "run", summary: "run or resume the task of a pipeline",
			usage:   "apollo run PIPELINE.yaml [flags]",
			example: "  apollo run scripts/examples/daily_data_pipeline.yaml --var region=eu\n  apollo run pipeline.yaml --dry-run --json\n  apollo run pipeline.yaml --resume-from transform",
			json:    planJSONDoc, args: engine.ArgPipeline, flags: func(fs *pflag.FlagSet) { new(runOptions).addFlags(fs) },
			run: cmdRun},
		{name: "validate", summary: "check a pipeline file without running it",
			usage: "apollo validate PIPELINE.yaml [--var k=v]...", example: "  apollo validate scripts/examples/daily_data_pipeline.yaml",
			args: engine.ArgPipeline, flags: func(fs *pflag.FlagSet) { new(validateOptions).addFlags(fs) },
			run: cmdValidate},
		{name: "inspect", summary: "show where a task stands, from its log alone",
			usage:   "apollo inspect TASK_ID|LOG.jsonl[.gz] [--json] [--state-dir DIR]",
			example: "  apollo inspect daily_data_pipeline-2026-12-03\n  apollo inspect .apollo/logs/task_x_1764748800.jsonl --json | jq '.steps[] | select(.status != \"SUCCESS\")'",
			json:    inspectJSONDoc, args: engine.ArgTask, flags: func(fs *pflag.FlagSet) { new(inspectOptions).addFlags(fs) },
			run: cmdInspect},
		{name: "list", summary: "list the task runs in the state folder, newest first",
			usage:   "apollo list [--json] [--ids] [--all] [--state-dir DIR]",
			example: "  apollo list\n  apollo list --json | jq -r '.runs[] | select(.status == \"failed\") | .task_id'\n  apollo list --ids --all",
			json:    listJSONDoc, flags: func(fs *pflag.FlagSet) { new(listOptions).addFlags(fs) },
			run: cmdList},
		{name: "logs", summary: "print a run's events, or a step attempt's output; -f follows a live run",
			usage:   "apollo logs TASK_ID [STEP] [--attempt N] [-f] [--state-dir DIR]",
			example: "  apollo logs daily_data_pipeline-2026-12-03            # the run's events, one line each\n  apollo logs daily_data_pipeline-2026-12-03 transform  # the latest attempt's stdout and stderr\n  apollo logs daily_data_pipeline-2026-12-03 fetch_raw --attempt 0\n  apollo logs daily_data_pipeline-2026-12-03 -f         # follow until the run ends (or Ctrl-C)",
			args:    engine.ArgTask, flags: func(fs *pflag.FlagSet) { new(logsOptions).addFlags(fs) },
			run: cmdLogs},
		{name: "graph", summary: "draw a pipeline's DAG (Graphviz DOT or Mermaid), coloured by a task's state",
			usage:   "apollo graph PIPELINE.yaml [--task-id ID] [--format dot|mermaid] [--var k=v]... [--state-dir DIR]",
			example: "  apollo graph scripts/examples/daily_data_pipeline.yaml | dot -Tsvg > dag.svg\n  apollo graph pipeline.yaml --task-id daily_data_pipeline-2026-12-03 --format mermaid",
			args:    engine.ArgPipeline, flags: func(fs *pflag.FlagSet) { new(graphOptions).addFlags(fs) },
			run: cmdGraph},
		{name: "gc", summary: "archive (gzip) the logs of finished runs older than a limit, and remove their outputs",
			usage:   "apollo gc --older-than AGE [--archive DIR] [--dry-run] [--json] [--state-dir DIR]",
			example: "  apollo gc --older-than 30d --dry-run\n  apollo gc --older-than 30d\n  apollo gc --older-than 12h --archive /mnt/backup/apollo",
			json:    gcJSONDoc, flags: func(fs *pflag.FlagSet) { new(gcOptions).addFlags(fs) },
			run: cmdGC},
		{name: "script", summary: "run a recovery script (Lua, with apollo.state) against a task's log",
			usage:   "apollo script RECOVERY.lua --task-id ID [--state-dir DIR] [-- args...]",
			example: "  apollo script fix.lua --task-id daily_data_pipeline-2026-12-03 -- transform\n  # fix.lua: require(\"apollo.state\").reset(arg[1], \"input corrected by hand\")",
			args:    engine.ArgLua, flags: func(fs *pflag.FlagSet) { new(scriptOptions).addFlags(fs) },
			run: cmdScript},
		{name: "schema", summary: "print the JSON Schema of the pipeline format, for editors",
			usage:   "apollo schema > pipeline.schema.json",
			example: "  apollo schema > pipeline.schema.json\n  # then, first line of a pipeline: # yaml-language-server: $schema=./pipeline.schema.json",
			run:     cmdSchema},
		{name: "completion", summary: "print a shell completion script (bash, zsh or fish)",
			usage:   "apollo completion bash|zsh|fish",
			example: "  source <(apollo completion bash)\n  apollo completion zsh > \"${fpath[1]}/_apollo\"\n  apollo completion fish > ~/.config/fish/completions/apollo.fish",
			args:    engine.ArgShell, run: cmdCompletion},
		{name: "lua-types", summary: "print the LuaLS annotations for ctx and apollo.*",
			usage: "apollo lua-types > apollo-types.lua", example: "  apollo lua-types > .luals/apollo.lua", run: cmdLuaTypes},
		{name: "version", summary: "print apollo's version", usage: "apollo version", example: "  apollo version", run: cmdVersion},
	}
}

// commandNamed returns the command called name.
func commandNamed(name string) *command {
	for _, c := range commands() {
		if c.name == name {
			return c
		}
	}
	panic("main: no command " + name) // names are constants in this file
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) > 1 && args[0] == "help" {
			return run([]string{args[1], "--help"}, stdout, stderr)
		}
		printHelp(stdout, cmds)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == engine.IsolatedCommand {
		err := engine.RunIsolatedChild(ctx, os.Stdin, stdout, engine.Options{Bundled: scripts.Modules()})
		if err != nil {
			fmt.Fprintf(stderr, "apollo: %v\n", err)
			return exitFailed
		}
		return exitOK
	}
	if args[0] == "--version" {
		args[0] = "version"
	}
	for _, c := range cmds {
		if c.name == args[0] {
			err := c.run(ctx, args[1:], stdout, stderr)
			return report(err, stderr)
		}
	}
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.name
	}
	msg := fmt.Sprintf("apollo: unknown command %q", args[0])
	if s := engine.Suggest(args[0], names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	fmt.Fprintf(stderr, "%s\nRun 'apollo --help' for the list of commands.\n", msg)
	return exitUsage
}

func printHelp(w io.Writer, cmds []*command) {
	fmt.Fprintf(w, "apollo runs long, many-step jobs as resumable DAGs over a plain JSON Lines event log.\n\n")
	fmt.Fprintf(w, "Usage:\n  apollo <command> [arguments]\n\nCommands:\n")
	for _, c := range cmds {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nExamples:\n  apollo run scripts/examples/daily_data_pipeline.yaml\n  apollo inspect daily_data_pipeline-2026-12-03\n  apollo list\n")
	fmt.Fprintf(w, "\nRun 'apollo <command> --help' for a command's flags.\n\n%s", exitCodeTable)
}

// errHelp is returned when --help was asked for: exit 0, help printed.
var errHelp = errors.New("help requested")

// report prints err for a person and maps it to an exit code.
func report(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	var (
		pe      *engine.PipelineError
		ue      *engine.UsageError
		nf      *engine.NotFoundError
		ce      *engine.ChangedError
		locked  *eventlog.LockedError
		failed  *engine.TaskFailedError
		stopped *engine.InterruptedError
	)
	switch {
	case errors.As(err, &pe):
		fmt.Fprintln(stderr, err)
		return exitUsage
	case errors.As(err, &ue), errors.As(err, &nf), errors.As(err, &ce):
		fmt.Fprintf(stderr, "apollo: %v\n", err)
		return exitUsage
	case errors.As(err, &locked):
		fmt.Fprintf(stderr, "apollo: %v\n", err)
		return exitLocked
	case errors.As(err, &stopped):
		fmt.Fprintf(stderr, "apollo: %v\n", err)
		return exitInterrupted
	case errors.As(err, &failed):
		fmt.Fprintf(stderr, "apollo: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(stderr, "apollo: %v\n", err)
	return exitFailed
}

// newFlags returns a flag set for c whose --help prints usage, flags,
// examples and exit codes.
func newFlags(c *command, stdout io.Writer) *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolP("help", "h", false, "show this help")
	return fs
}

// parse parses args; it prints help and returns errHelp for --help, and
// turns flag errors into usage errors with a suggestion.
func parse(c *command, fs *pflag.FlagSet, args []string, stdout io.Writer) error {
	if err := fs.Parse(args); err != nil {
		msg := fmt.Sprintf("%s: %v", c.name, err)
		if name, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok {
			var flags []string
			fs.VisitAll(func(f *pflag.Flag) { flags = append(flags, f.Name) })
			if s := engine.Suggest(name, flags); s != "" {
				msg += fmt.Sprintf(" (did you mean --%s?)", s)
			}
		}
		return &engine.UsageError{Msg: msg + "\nRun 'apollo " + c.name + " --help' for usage."}
	}
	// An empty value given explicitly is most likely an unset shell
	// variable (--task-id "$ID"); taking the default instead would run or
	// show another task, or use another state folder, without a word.
	for _, name := range []string{"task-id", "state-dir"} {
		if f := fs.Lookup(name); f != nil && f.Changed && f.Value.String() == "" {
			return &engine.UsageError{Msg: fmt.Sprintf("%s: --%s is empty; give a value or leave the flag out", c.name, name)}
		}
	}
	if h, _ := fs.GetBool("help"); h {
		fmt.Fprintf(stdout, "%s\n\nUsage:\n  %s\n\nFlags:\n%s\nExamples:\n%s\n\n", c.summary, c.usage, fs.FlagUsages(), c.example)
		if c.json != "" {
			fmt.Fprintf(stdout, "%s\n", c.json)
		}
		fmt.Fprint(stdout, exitCodeTable)
		return errHelp
	}
	return nil
}

// stateDirDefault is --state-dir's default: APOLLO_HOME, else .apollo.
func stateDirDefault() string {
	if d := os.Getenv("APOLLO_HOME"); d != "" {
		return d
	}
	return ".apollo"
}

// parseVars turns --var k=v flags into a map.
func parseVars(list []string) (map[string]string, error) {
	vars := map[string]string{}
	for _, kv := range list {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, &engine.UsageError{Msg: fmt.Sprintf("--var %q: expected name=value", kv)}
		}
		vars[k] = v
	}
	return vars, nil
}

type runOptions struct {
	vars          []string
	taskID        string
	fresh         bool
	resumeFrom    string
	acceptChanges bool
	dryRun        bool
	json          bool
	parallel      int
	stateDir      string
	quiet         bool
	progress      string
}

func (o *runOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.vars, "var", nil, "set a template variable (repeatable): --var k=v")
	fs.StringVar(&o.taskID, "task-id", "", "name the task run (default <task_name>-<task_date>)")
	fs.BoolVar(&o.fresh, "fresh", false, "start a new log for the task instead of resuming")
	fs.StringVar(&o.resumeFrom, "resume-from", "", "run STEP and its descendants again; skip other unfinished steps")
	fs.BoolVar(&o.acceptChanges, "accept-changes", false, "keep the results of succeeded steps whose definition changed")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the plan (keep / clean+rerun / rerun / skip) and write nothing")
	fs.BoolVar(&o.json, "json", false, "with --dry-run: print the plan as JSON")
	fs.IntVar(&o.parallel, "parallel", 0, "most steps running at once (default: the pipeline's parallelism, else CPU count)")
	fs.StringVar(&o.stateDir, "state-dir", stateDirDefault(), "folder for logs, locks, artifacts and outputs (env APOLLO_HOME)")
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print nothing but errors")
	fs.StringVar(&o.progress, "progress", engine.ProgressAuto, "progress display: auto, board, plain or quiet")
}

func newEngine(stateDir, progress string, stdout, stderr io.Writer) *engine.Engine {
	grace := 5 * time.Second
	if g, err := time.ParseDuration(os.Getenv("APOLLO_KILL_GRACE")); err == nil && g > 0 {
		grace = g
	}
	var maxOutput int64 // the engine's default
	if mb, err := strconv.ParseInt(os.Getenv("APOLLO_MAX_OUTPUT_MB"), 10, 64); err == nil {
		maxOutput = -1 // 0: no limit
		if mb > 0 && mb < 1<<40 {
			maxOutput = mb << 20
		}
	}
	color := os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
	return engine.New(engine.Options{StateDir: stateDir, Stdout: stdout, Stderr: stderr, Progress: progress,
		Color: color, KillGrace: grace, MaxOutputBytes: maxOutput, Version: version(), Bundled: scripts.Modules()})
}

func cmdRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("run")
	var o runOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &engine.UsageError{Msg: "run: expected one pipeline file\nUsage: " + c.usage}
	}
	if o.json && !o.dryRun {
		return &engine.UsageError{Msg: "run: --json goes with --dry-run"}
	}
	if o.fresh && o.resumeFrom != "" {
		return &engine.UsageError{Msg: "run: --fresh and --resume-from do not go together: a fresh run has nothing to resume"}
	}
	// 0 is the flag's "unset" value; given explicitly it would mean "run
	// nothing at once", which no one means.
	if fs.Changed("parallel") && o.parallel < 1 {
		return &engine.UsageError{Msg: fmt.Sprintf("run: --parallel %d: must be at least 1 (leave it out to use the pipeline's parallelism)", o.parallel)}
	}
	switch o.progress {
	case engine.ProgressAuto, engine.ProgressBoard, engine.ProgressPlain, engine.ProgressQuiet:
	default:
		return &engine.UsageError{Msg: fmt.Sprintf("run: --progress %q: expected auto, board, plain or quiet", o.progress)}
	}
	if o.quiet {
		o.progress = engine.ProgressQuiet
	}
	vars, err := parseVars(o.vars)
	if err != nil {
		return err
	}
	e := newEngine(o.stateDir, o.progress, stdout, stderr)
	return e.Run(ctx, fs.Arg(0), engine.RunOptions{Vars: vars, TaskID: o.taskID, Fresh: o.fresh,
		ResumeFrom: o.resumeFrom, AcceptChanges: o.acceptChanges, Parallel: o.parallel, DryRun: o.dryRun, JSON: o.json})
}

type validateOptions struct {
	vars []string
}

func (o *validateOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.vars, "var", nil, "set a template variable (repeatable): --var k=v")
}

func cmdValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("validate")
	var o validateOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &engine.UsageError{Msg: "validate: expected one pipeline file\nUsage: " + c.usage}
	}
	vm, err := parseVars(o.vars)
	if err != nil {
		return err
	}
	e := newEngine(stateDirDefault(), engine.ProgressQuiet, stdout, stderr)
	pl, err := e.Plan(fs.Arg(0), engine.RunOptions{Vars: vm})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok: %d steps, task %s\n", fs.Arg(0), len(pl.Steps), pl.TaskID)
	return nil
}

// stateDirFlag adds --state-dir to fs.
func stateDirFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "state-dir", stateDirDefault(), "folder for logs, locks, artifacts and outputs (env APOLLO_HOME)")
}

type inspectOptions struct {
	json     bool
	stateDir string
}

func (o *inspectOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	stateDirFlag(fs, &o.stateDir)
}

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("inspect")
	var o inspectOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &engine.UsageError{Msg: "inspect: expected a task id or a log file\nUsage: " + c.usage}
	}
	e := newEngine(o.stateDir, engine.ProgressQuiet, stdout, stderr)
	rep, err := e.Inspect(fs.Arg(0))
	if err != nil {
		return err
	}
	if o.json {
		return engine.WriteReportJSON(stdout, rep)
	}
	engine.WriteReport(stdout, rep, time.Now())
	return nil
}

type listOptions struct {
	json     bool
	ids      bool
	all      bool
	stateDir string
}

func (o *listOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.json, "json", false, "print the runs as JSON")
	fs.BoolVar(&o.ids, "ids", false, "print only the task ids, one a line (for scripts and shell completion)")
	fs.BoolVar(&o.all, "all", false, "also list the runs that apollo gc archived in <state-dir>/archive")
	stateDirFlag(fs, &o.stateDir)
}

func cmdList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("list")
	var o listOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &engine.UsageError{Msg: "list: takes no arguments\nUsage: " + c.usage}
	}
	if o.json && o.ids {
		return &engine.UsageError{Msg: "list: --json and --ids do not go together: pick one output"}
	}
	return runList(ctx, o, stdout)
}

// runList prints the task runs of o.stateDir.
func runList(ctx context.Context, o listOptions, stdout io.Writer) error {
	e := newEngine(o.stateDir, engine.ProgressQuiet, io.Discard, io.Discard)
	runs, err := e.List(engine.ListOptions{All: o.all})
	if err != nil {
		return err
	}
	switch {
	case o.json:
		return engine.WriteListJSON(stdout, runs)
	case o.ids:
		for _, id := range engine.TaskIDs(runs) {
			fmt.Fprintln(stdout, id)
		}
	default:
		engine.WriteList(stdout, runs, time.Local)
	}
	return nil
}

type logsOptions struct {
	taskID   string // the first argument
	step     string // the second argument, if any
	attempt  int
	follow   bool
	stateDir string
}

func (o *logsOptions) addFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.attempt, "attempt", -1, "with STEP: the attempt (retry_count) whose output to print; -1 is the latest")
	fs.BoolVarP(&o.follow, "follow", "f", false, "keep printing what a live run adds until it ends (or Ctrl-C)")
	stateDirFlag(fs, &o.stateDir)
}

func cmdLogs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("logs")
	var o logsOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() < 1 || fs.NArg() > 2 {
		return &engine.UsageError{Msg: "logs: expected a task id and, optionally, a step\nUsage: " + c.usage}
	}
	if fs.Changed("attempt") && fs.NArg() != 2 {
		return &engine.UsageError{Msg: "logs: --attempt goes with a STEP: apollo logs TASK_ID STEP --attempt N"}
	}
	if o.attempt < -1 || (fs.Changed("attempt") && o.attempt < 0) {
		return &engine.UsageError{Msg: "logs: --attempt must be 0 or more"}
	}
	o.taskID, o.step = fs.Arg(0), fs.Arg(1)
	return runLogs(ctx, o, stdout, stderr)
}

// runLogs prints a run's events or a step's output, following a live run
// with o.follow until it ends or ctx is done (Ctrl-C: exit 0).
func runLogs(ctx context.Context, o logsOptions, stdout, stderr io.Writer) error {
	e := newEngine(o.stateDir, engine.ProgressQuiet, stdout, stderr)
	return e.Logs(ctx, o.taskID, engine.LogsOptions{Step: o.step, Attempt: o.attempt, Follow: o.follow})
}

type graphOptions struct {
	pipeline string // the argument
	taskID   string
	format   string
	vars     []string
	stateDir string
}

func (o *graphOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.taskID, "task-id", "", "colour each step by its state in this task's latest log")
	fs.StringVar(&o.format, "format", engine.GraphDOT, "output format: dot (Graphviz) or mermaid")
	fs.StringArrayVar(&o.vars, "var", nil, "set a template variable (repeatable): --var k=v")
	stateDirFlag(fs, &o.stateDir)
}

func cmdGraph(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("graph")
	var o graphOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &engine.UsageError{Msg: "graph: expected one pipeline file\nUsage: " + c.usage}
	}
	o.pipeline = fs.Arg(0)
	return runGraph(ctx, o, stdout, stderr)
}

// runGraph prints the DAG of o.pipeline in o.format.
func runGraph(ctx context.Context, o graphOptions, stdout, stderr io.Writer) error {
	write := engine.WriteDOT
	switch o.format {
	case engine.GraphDOT:
	case engine.GraphMermaid:
		write = engine.WriteMermaid
	default:
		msg := fmt.Sprintf("graph: --format %q: expected dot or mermaid", o.format)
		if s := engine.Suggest(o.format, []string{engine.GraphDOT, engine.GraphMermaid}); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return &engine.UsageError{Msg: msg}
	}
	vars, err := parseVars(o.vars)
	if err != nil {
		return err
	}
	e := newEngine(o.stateDir, engine.ProgressQuiet, stdout, stderr)
	g, err := e.Graph(o.pipeline, engine.GraphOptions{TaskID: o.taskID, Vars: vars})
	if err != nil {
		return err
	}
	return write(stdout, g)
}

type gcOptions struct {
	olderThan string
	archive   string
	dryRun    bool
	json      bool
	stateDir  string
}

func (o *gcOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.olderThan, "older-than", "", "archive finished runs whose last event is older than this: 30d, 12h, 90m, 1h30m (required)")
	fs.StringVar(&o.archive, "archive", "", "folder for the compressed logs (default <state-dir>/archive, where inspect and logs find them)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print what would be archived and removed, and change nothing")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON")
	stateDirFlag(fs, &o.stateDir)
}

func cmdGC(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("gc")
	var o gcOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &engine.UsageError{Msg: "gc: takes no arguments\nUsage: " + c.usage}
	}
	return runGC(ctx, o, stdout, stderr)
}

// runGC archives the finished runs older than o.olderThan.
func runGC(ctx context.Context, o gcOptions, stdout, stderr io.Writer) error {
	if o.olderThan == "" {
		return &engine.UsageError{Msg: "gc: --older-than is required: say how old a finished run must be to be archived, like --older-than 30d"}
	}
	age, err := engine.ParseAge(o.olderThan)
	if err != nil {
		return &engine.UsageError{Msg: "gc: --older-than: " + err.Error()}
	}
	e := newEngine(o.stateDir, engine.ProgressQuiet, stdout, stderr)
	res, err := e.GC(engine.GCOptions{OlderThan: age, Archive: o.archive, DryRun: o.dryRun})
	if err != nil {
		return err
	}
	if o.json {
		return engine.WriteGCJSON(stdout, res)
	}
	engine.WriteGC(stdout, res)
	return nil
}

type scriptOptions struct {
	taskID   string
	stateDir string
}

func (o *scriptOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.taskID, "task-id", "", "the task whose log the script reads and amends (required)")
	stateDirFlag(fs, &o.stateDir)
}

func cmdScript(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("script")
	var o scriptOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return &engine.UsageError{Msg: "script: expected a Lua file\nUsage: " + c.usage}
	}
	if o.taskID == "" {
		return &engine.UsageError{Msg: "script: --task-id is required: name the task the script works on"}
	}
	e := newEngine(o.stateDir, engine.ProgressQuiet, stdout, stderr)
	return e.Script(ctx, fs.Arg(0), engine.ScriptOptions{TaskID: o.taskID, Args: fs.Args()[1:]})
}

func cmdSchema(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("schema")
	fs := newFlags(c, stdout)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &engine.UsageError{Msg: "schema: takes no arguments\nUsage: " + c.usage}
	}
	_, err := stdout.Write(engine.PipelineSchema())
	return err
}

func cmdCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("completion")
	fs := newFlags(c, stdout)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &engine.UsageError{Msg: "completion: expected a shell: bash, zsh or fish\nUsage: " + c.usage}
	}
	return engine.WriteCompletion(stdout, fs.Arg(0), completionCommands(commands()))
}

// completionCommands describes cmds, with their flags, for shell completion.
func completionCommands(cmds []*command) []engine.CompletionCommand {
	var out []engine.CompletionCommand
	for _, c := range cmds {
		cc := engine.CompletionCommand{Name: c.name, Summary: c.summary, Args: c.args}
		fs := newFlags(c, io.Discard)
		if c.flags != nil {
			c.flags(fs)
		}
		fs.VisitAll(func(f *pflag.Flag) { cc.Flags = append(cc.Flags, completionFlag(f)) })
		out = append(out, cc)
	}
	return out
}

// completionFlag says what a flag's value is, for shell completion.
func completionFlag(f *pflag.Flag) engine.CompletionFlag {
	cf := engine.CompletionFlag{Name: f.Name, Short: f.Shorthand, Usage: f.Usage, Value: engine.ValueAny}
	switch {
	case f.Value.Type() == "bool":
		cf.Value = engine.ValueNone
	case f.Name == "state-dir" || f.Name == "archive":
		cf.Value = engine.ValueDir
	case f.Name == "task-id":
		cf.Value = engine.ValueTask
	case f.Name == "format":
		cf.Values = []string{engine.GraphDOT, engine.GraphMermaid}
	case f.Name == "progress":
		cf.Values = []string{engine.ProgressAuto, engine.ProgressBoard, engine.ProgressPlain, engine.ProgressQuiet}
	case f.Name == "older-than":
		cf.Values = []string{"30d", "7d", "1d", "12h"}
	}
	return cf
}

// The --json outputs, documented in --help and the README. Fields marked ?
// are left out when empty.
const (
	planJSONDoc = `JSON (--dry-run --json), one object:
  {"task_id", "pipeline", "log", "new_log": bool, "complete": bool, "resume_from"?,
   "changed"?: [step ids whose definition changed], "torn_tail_bytes"?,
   "steps": [{"id", "action": "run"|"keep"|"rerun"|"clean+rerun"|"skip"|"fail", "reason",
              "status", "next_retry_count", "depends_on": [ids], "optional": bool,
              "command"? (rendered shell), "body"? (Lua), "cleanup"?, "wait_ms"?}]}
  steps are in dependency order.
`
	inspectJSONDoc = `JSON (--json), one object:
  {"task_id", "task_name", "log", "pipeline",
   "status": "complete"|"failed"|"interrupted"|"running"|"unfinished",
   "runner": {"held": bool, "pid"?}, "invocations", "started_at", "last_event",
   "steps": [{"id", "status", "attempts", "retry_count", "dirty": bool, "optional": bool,
              "depends_on": [ids], "last_timestamp", "duration_ms", "last_error", "output_digest"?}],
   "next": [step ids a run would start first], "markers": [{"name", "state"}],
   "torn_tail_bytes"?, "archived"? (true: read from apollo gc's archive), "records"}
  Times are RFC 3339 UTC.
`
	listJSONDoc = `JSON (--json), one object:
  {"runs": [{"task_id", "task_name", "log", "archived": bool,
             "status": "running"|"succeeded"|"failed"|"interrupted"|"unfinished"|"corrupt",
             "pid"? (the runner's), "started_at", "last_event", "duration_ms", "invocations",
             "steps": {"total", "done", "failed", "running", "pending"}, "error"? (corrupt)}]}
  runs are newest first; one entry per log (a task run with --fresh has several).
  duration_ms is the time its invocations ran (to now while running); done counts
  SUCCESS and SKIPPED steps. Times are RFC 3339 UTC.
`
	gcJSONDoc = `JSON (--json), one object:
  {"dry_run": bool, "older_than" (a Go duration), "cutoff" (RFC 3339), "archive",
   "archived": [{"task_id", "log", "archive" (the .jsonl.gz), "status", "last_event",
                 "bytes", "archived_bytes" (0 in a dry run)}],
   "removed": [output folders and snapshots],
   "kept": [{"task_id", "log", "reason": "running"|"unfinished"|"recent"|"corrupt", "detail"}]}
`
)

func cmdLuaTypes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("lua-types")
	fs := newFlags(c, stdout)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	_, err := stdout.Write(scripts.LuaTypes())
	return err
}

func cmdVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("version")
	fs := newFlags(c, stdout)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "apollo %s\n", version())
	return nil
}

// version is the module version, or the VCS revision of a development build.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v + " (" + bi.GoVersion + ")"
}
