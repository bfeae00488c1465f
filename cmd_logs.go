package main

import (
	"context"
	"os"

	"github.com/spf13/pflag"

	"apollo/engine/completion"
	"apollo/engine/history"
	"apollo/engine/usage"
)

func logsCommand() *command[*logsOptions] {
	return &command[*logsOptions]{
		about: about{name: "logs", summary: "print a run's events, or a step attempt's output; -f follows a live run",
			usage:   "apollo logs TASK_ID [STEP] [--attempt N] [-f] [--state-dir DIR | --hub URLS]",
			example: "  apollo logs daily_data_pipeline-2026-12-03            # the run's events, one line each\n  apollo logs daily_data_pipeline-2026-12-03 transform  # the latest attempt's stdout and stderr\n  apollo logs daily_data_pipeline-2026-12-03 fetch_raw --attempt 0\n  apollo logs daily_data_pipeline-2026-12-03 -f         # follow until the run ends (or Ctrl-C)",
			argKind: completion.ArgTask},
		nargs: positional{1, 2, "expected a task id and, optionally, a step"},
		flags: newLogsOptions,
		run:   runLogs,
	}
}

// logsOptions are the flags of apollo logs.
type logsOptions struct {
	attempt  int
	follow   bool
	stateDir string
	hub      hubFlags
}

// newLogsOptions returns apollo logs's options, bound to the flags it adds to fs.
func newLogsOptions(fs *pflag.FlagSet) *logsOptions {
	o := new(logsOptions)
	fs.IntVar(&o.attempt, "attempt", -1, "with STEP: the attempt (retry_count) whose output to print; -1 is the latest")
	fs.BoolVarP(&o.follow, "follow", "f", false, "keep printing what a live run adds until it ends (or Ctrl-C)")
	stateDirFlag(fs, &o.stateDir)
	o.hub.addFlags(fs, "print the run's events from the task's log in the hub (comma-separated URLs), where a run with --hub keeps it")
	return o
}

// runLogs prints the events of the run in.args[0], or the output of its
// step in.args[1], following a live run with o.follow until it ends or ctx
// is done (Ctrl-C, or its reader gone: exit 0).
func runLogs(ctx context.Context, o *logsOptions, in invocation) error {
	step := ""
	if len(in.args) == 2 {
		step = in.args[1]
	}
	if in.changed("attempt") && step == "" {
		return &usage.Error{Msg: "logs: --attempt goes with a STEP: apollo logs TASK_ID STEP --attempt N"}
	}
	if o.attempt < -1 || (in.changed("attempt") && o.attempt < 0) {
		return &usage.Error{Msg: "logs: --attempt must be 0 or more"}
	}
	dir := o.stateDir
	if o.hub.urls != "" {
		if step != "" || o.follow {
			return &usage.Error{Msg: "logs --hub prints the run's events as the hub has them: a step's output and -f need the coordinator's state folder (--state-dir)"}
		}
		var err error
		if dir, err = hubLogFolder(ctx, &o.hub, in.args[0]); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	// Following stops, quietly, once no one reads what it prints.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		select {
		case <-readerGone(in.stdout):
			stop()
		case <-ctx.Done():
		}
	}()
	return runsIn(dir, in).Logs(ctx, in.args[0], history.LogsOptions{Step: step, Attempt: o.attempt, Follow: o.follow})
}
