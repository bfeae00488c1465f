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
	"apollo/engine/container"
	"apollo/engine/executor"
	"apollo/engine/history"
	"apollo/engine/pipeline"
	"apollo/engine/remote"
	"apollo/engine/statedir"
	"apollo/engine/trace"
	"apollo/engine/usage"
	"apollo/eventlog"
	"apollo/scripts"
)

func main() { os.Exit(runCLI(os.Args[1:], os.Stdout, os.Stderr)) }

// Exit codes (docs/spec.md §7).
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

// commonExitCodes is the exit code table of a command whose about names
// none of its own.
const commonExitCodes = `Exit codes:
  0    done
  1    it could not be done: a damaged log, a disk error (the message says which)
  2    a usage error, or an unknown task id; nothing was changed
`

// simpleExitCodes is the table of the commands that only print.
const simpleExitCodes = `Exit codes:
  0    done
  2    a usage error
`

// commands returns apollo's commands, in the order help lists them.
func commands() []subcommand {
	return []subcommand{
		runCommand(), hubCommand(), workerCommand(), validateCommand(), inspectCommand(), listCommand(), logsCommand(), graphCommand(),
		gcCommand(), cacheCommand(), scriptCommand(), serveCommand(), schemaCommand(), completionCommand(), luaTypesCommand(), versionCommand(),
	}
}

// runCLI runs the command line args (without the program name) and returns
// the exit code.
func runCLI(args []string, stdout, stderr io.Writer) int {
	cmds := commands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		if len(args) > 1 && args[0] == "help" {
			return runCLI([]string{args[1], "--help"}, stdout, stderr)
		}
		printHelp(stdout, cmds)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	// Help above only prints: catching signals starts three threads.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if args[0] == executor.IsolatedCommand { // its stdout is its runner's pipe: SIGPIPE ends it as before
		return runIsolatedChild(ctx, stdout, stderr)
	}
	// A closed stdout or stderr must not kill a run: with SIGPIPE caught
	// (not ignored, which the steps' processes would inherit), a write to
	// a pipe without a reader fails with EPIPE, which the outlets absorb.
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	stdout, stderr = newOutlet(stdout), newOutlet(stderr)
	if args[0] == "--version" {
		args[0] = "version"
	}
	for _, c := range cmds {
		if c.describe().name == args[0] {
			return report(execute(ctx, c, args[1:], stdout, stderr), stderr)
		}
	}
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.describe().name
	}
	msg := fmt.Sprintf("apollo: unknown command %q", args[0])
	if s := pipeline.Suggest(args[0], names); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	fmt.Fprintf(stderr, "%s\nRun 'apollo --help' for the list of commands.\n", msg)
	return exitUsage
}

// printHelp prints apollo's help: its commands and exit codes.
func printHelp(w io.Writer, cmds []subcommand) {
	fmt.Fprintf(w, "apollo runs long, many-step jobs as resumable DAGs over a plain JSON Lines event log.\n\n")
	fmt.Fprintf(w, "Usage:\n  apollo <command> [arguments]\n\nCommands:\n")
	for _, c := range cmds {
		a := c.describe()
		fmt.Fprintf(w, "  %-11s %s\n", a.name, a.summary)
	}
	fmt.Fprintf(w, "\nExamples:\n  apollo run scripts/examples/daily_data_pipeline.yaml\n  apollo inspect daily_data_pipeline-2026-12-03\n  apollo list\n")
	fmt.Fprintf(w, "\nRun 'apollo <command> --help' for a command's flags.\n\n%s", exitCodeTable)
}

// report prints err for a person and maps it to an exit code.
func report(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	var (
		pe      *pipeline.Error
		ue      *usage.Error
		nf      *statedir.NotFoundError
		ce      *engine.ChangedError
		locked  *eventlog.LockedError
		failed  *engine.TaskFailedError
		stopped *engine.InterruptedError
		held    *remote.HeldError
	)
	switch {
	case errors.As(err, &pe):
		fmt.Fprintln(stderr, err)
		return exitUsage
	case errors.As(err, &ue), errors.As(err, &nf), errors.As(err, &ce):
		fmt.Fprintf(stderr, "apollo: %v\n", err)
		return exitUsage
	case errors.As(err, &locked), errors.As(err, &held):
		fmt.Fprintf(stderr, "apollo: %v\n", err)
		return exitLocked
	case errors.As(err, &stopped):
		fmt.Fprintf(stderr, "apollo: %v\n", err)
		return exitInterrupted
	case errors.As(err, &failed):
		fmt.Fprintf(stderr, "apollo: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(stderr, "apollo: %v%s\n", err, advice(err))
	return exitFailed
}

// advice is what to do about an error of the event log, whose own messages
// say what happened and name no command.
func advice(err error) string {
	switch {
	case errors.As(err, new(*eventlog.NewerFormatError)):
		return ": continue the task with that apollo or a later one (apollo inspect can still read the log), " +
			"or start it over with `apollo run --fresh` (the log stays as it is)"
	case errors.As(err, new(*eventlog.CorruptError)):
		return "; restore it from a copy, or start the task over with `apollo run --fresh` (the damaged log stays as it is)"
	case errors.As(err, new(*eventlog.WriteError)):
		return "; fix the disk, then run apollo again to resume"
	case errors.As(err, new(*eventlog.LockLostError)):
		return "; `apollo list` shows the runner that holds the task now; once it ends, run the same command again to resume"
	case errors.As(err, new(*eventlog.UnsafeFileError)):
		return "; apollo did not make it: remove it, then run again"
	}
	return ""
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
			return nil, &usage.Error{Msg: fmt.Sprintf("--var %q: expected name=value", kv)}
		}
		vars[k] = v
	}
	return vars, nil
}

// varsFlag adds --var to fs; parseVars reads what it collected.
func varsFlag(fs *pflag.FlagSet, p *[]string) {
	fs.StringArrayVar(p, "var", nil, "set a template variable (repeatable): --var k=v")
}

// stateDirFlag adds --state-dir to fs.
func stateDirFlag(fs *pflag.FlagSet, p *string) {
	fs.StringVar(p, "state-dir", stateDirDefault(), "folder for logs, locks, artifacts and outputs (env APOLLO_HOME)")
}

// runsIn reads the task runs of stateDir for a command, printing to its
// output.
func runsIn(stateDir string, in invocation) history.Runs {
	return history.Runs{Dir: statedir.Dir{Root: stateDir}, Stdout: in.stdout, Stderr: in.stderr}
}

// containerConfig is how this machine runs container steps:
// APOLLO_CONTAINER_ENGINE, and the engine flags APOLLO_CONTAINER_FLAGS and
// APOLLO_CONTAINER_RUN_FLAGS (separated by spaces).
func containerConfig() container.Config {
	return container.Config{Engine: os.Getenv("APOLLO_CONTAINER_ENGINE"),
		Flags:    strings.Fields(os.Getenv("APOLLO_CONTAINER_FLAGS")),
		RunFlags: strings.Fields(os.Getenv("APOLLO_CONTAINER_RUN_FLAGS"))}
}

// newEngine returns the engine a command works with, set up from the
// environment (APOLLO_KILL_GRACE, APOLLO_MAX_OUTPUT_MB, NO_COLOR, TERM,
// APOLLO_CONTAINER_*).
func newEngine(stateDir, progress string, stdout, stderr io.Writer, tracer *trace.Tracer) *engine.Engine {
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
		Color: color, KillGrace: grace, MaxOutputBytes: maxOutput, Version: version(), Bundled: scripts.Modules(),
		Container: containerConfig(), Tracer: tracer})
}
