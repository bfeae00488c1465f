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

// stateDirFlag adds --state-dir to fs.
func stateDirFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "state-dir", stateDirDefault(), "folder for logs, locks, artifacts and outputs (env APOLLO_HOME)")
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
