package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"

	"apollo/engine"
)

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
