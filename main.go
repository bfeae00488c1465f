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
  2    a usage or pipeline error; nothing was run or written
  3    the task is already being run by another apollo process (its pid is named)
  130  interrupted by SIGINT or SIGTERM; run the same command to resume
`

// command is one subcommand.
type command struct {
	name    string
	summary string
	usage   string
	example string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []*command {
	return []*command{
		{name: "run", summary: "run or resume the task of a pipeline",
			usage:   "apollo run PIPELINE.yaml [flags]",
			example: "  apollo run scripts/examples/daily_data_pipeline.yaml --var region=eu\n  apollo run pipeline.yaml --dry-run --json\n  apollo run pipeline.yaml --resume-from transform",
			run:     cmdRun},
		{name: "validate", summary: "check a pipeline file without running it",
			usage: "apollo validate PIPELINE.yaml [--var k=v]...", example: "  apollo validate scripts/examples/daily_data_pipeline.yaml",
			run: cmdValidate},
		{name: "inspect", summary: "show where a task stands, from its log alone",
			usage:   "apollo inspect TASK_ID|LOG.jsonl [--json] [--state-dir DIR]",
			example: "  apollo inspect daily_data_pipeline-2026-12-03\n  apollo inspect .apollo/logs/task_x_1764748800.jsonl --json | jq '.steps[] | select(.status != \"SUCCESS\")'",
			run:     cmdInspect},
		{name: "script", summary: "run a recovery script (Lua, with apollo.state) against a task's log",
			usage:   "apollo script RECOVERY.lua --task-id ID [--state-dir DIR] [-- args...]",
			example: "  apollo script fix.lua --task-id daily_data_pipeline-2026-12-03 -- transform\n  # fix.lua: require(\"apollo.state\").reset(arg[1], \"input corrected by hand\")",
			run:     cmdScript},
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
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nExamples:\n  apollo run scripts/examples/daily_data_pipeline.yaml\n  apollo inspect daily_data_pipeline-2026-12-03\n")
	fmt.Fprintf(w, "\nRun 'apollo <command> --help' for a command's flags.\n\n%s", exitCodeTable)
}

// errHelp is returned when --help was asked for: exit 0, help printed.
var errHelp = errors.New("help requested")

// usageError is a bad command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// report prints err for a person and maps it to an exit code.
func report(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	var (
		pe      *engine.PipelineError
		ue      *engine.UsageError
		ce      *engine.ChangedError
		cliErr  *usageError
		locked  *eventlog.LockedError
		failed  *engine.TaskFailedError
		stopped *engine.InterruptedError
	)
	switch {
	case errors.As(err, &pe):
		fmt.Fprintln(stderr, err)
		return exitUsage
	case errors.As(err, &ue), errors.As(err, &ce), errors.As(err, &cliErr):
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
		return &usageError{msg: msg + "\nRun 'apollo " + c.name + " --help' for usage."}
	}
	if h, _ := fs.GetBool("help"); h {
		fmt.Fprintf(stdout, "%s\n\nUsage:\n  %s\n\nFlags:\n%s\nExamples:\n%s\n\n%s", c.summary, c.usage,
			fs.FlagUsages(), c.example, exitCodeTable)
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
			return nil, &usageError{msg: fmt.Sprintf("--var %q: expected name=value", kv)}
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
	color := os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
	return engine.New(engine.Options{StateDir: stateDir, Stdout: stdout, Stderr: stderr, Progress: progress,
		Color: color, KillGrace: grace, Version: version(), Bundled: scripts.Modules()})
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
		return &usageError{msg: "run: expected one pipeline file\nUsage: " + c.usage}
	}
	if o.json && !o.dryRun {
		return &usageError{msg: "run: --json goes with --dry-run"}
	}
	if o.fresh && o.resumeFrom != "" {
		return &usageError{msg: "run: --fresh and --resume-from do not go together: a fresh run has nothing to resume"}
	}
	if o.parallel < 0 {
		return &usageError{msg: "run: --parallel must be at least 1"}
	}
	switch o.progress {
	case engine.ProgressAuto, engine.ProgressBoard, engine.ProgressPlain, engine.ProgressQuiet:
	default:
		return &usageError{msg: fmt.Sprintf("run: --progress %q: expected auto, board, plain or quiet", o.progress)}
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

func cmdValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("validate")
	var vars []string
	fs := newFlags(c, stdout)
	fs.StringArrayVar(&vars, "var", nil, "set a template variable (repeatable): --var k=v")
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{msg: "validate: expected one pipeline file\nUsage: " + c.usage}
	}
	vm, err := parseVars(vars)
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

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("inspect")
	var asJSON bool
	var stateDir string
	fs := newFlags(c, stdout)
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.StringVar(&stateDir, "state-dir", stateDirDefault(), "folder for logs, locks, artifacts and outputs (env APOLLO_HOME)")
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{msg: "inspect: expected a task id or a log file\nUsage: " + c.usage}
	}
	e := newEngine(stateDir, engine.ProgressQuiet, stdout, stderr)
	rep, err := e.Inspect(fs.Arg(0))
	if err != nil {
		return err
	}
	if asJSON {
		return engine.WriteReportJSON(stdout, rep)
	}
	engine.WriteReport(stdout, rep, time.Now())
	return nil
}

func cmdScript(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("script")
	var taskID, stateDir string
	fs := newFlags(c, stdout)
	fs.StringVar(&taskID, "task-id", "", "the task whose log the script reads and amends (required)")
	fs.StringVar(&stateDir, "state-dir", stateDirDefault(), "folder for logs, locks, artifacts and outputs (env APOLLO_HOME)")
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return &usageError{msg: "script: expected a Lua file\nUsage: " + c.usage}
	}
	if taskID == "" {
		return &usageError{msg: "script: --task-id is required: name the task the script works on"}
	}
	e := newEngine(stateDir, engine.ProgressQuiet, stdout, stderr)
	return e.Script(ctx, fs.Arg(0), engine.ScriptOptions{TaskID: taskID, Args: fs.Args()[1:]})
}

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
