package main

import (
	"context"
	"os"
	"time"

	"github.com/spf13/pflag"

	"apollo/engine/completion"
	"apollo/engine/history"
)

func inspectCommand() *command[*inspectOptions] {
	return &command[*inspectOptions]{
		about: about{name: "inspect", summary: "show where a task stands, from its log alone",
			usage:   "apollo inspect TASK_ID|LOG.jsonl[.gz] [--json] [--state-dir DIR | --hub URLS]",
			example: "  apollo inspect daily_data_pipeline-2026-12-03\n  apollo inspect .apollo/logs/task_x_1764748800.jsonl --json | jq '.steps[] | select(.status != \"SUCCESS\")'",
			json:    history.ReportJSONDoc, argKind: completion.ArgTask},
		nargs: positional{1, 1, "expected a task id or a log file"},
		flags: newInspectOptions,
		run:   runInspect,
	}
}

// inspectOptions are the flags of apollo inspect.
type inspectOptions struct {
	json     bool
	stateDir string
	hub      hubFlags
}

// newInspectOptions returns apollo inspect's options, bound to the flags it adds to fs.
func newInspectOptions(fs *pflag.FlagSet) *inspectOptions {
	o := new(inspectOptions)
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	stateDirFlag(fs, &o.stateDir)
	o.hub.addFlags(fs, "read the task's log from the hub's nodes (comma-separated URLs), where a run with --hub keeps it")
	return o
}

// runInspect reports on the task or log file in.args[0].
func runInspect(ctx context.Context, o *inspectOptions, in invocation) error {
	dir := o.stateDir
	if o.hub.urls != "" {
		var err error
		if dir, err = hubLogFolder(ctx, &o.hub, in.args[0]); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	rep, err := runsIn(dir, in).Inspect(in.args[0])
	if err != nil {
		return err
	}
	if o.json {
		return history.WriteReportJSON(in.stdout, rep)
	}
	history.WriteReport(in.stdout, rep, time.Now())
	return nil
}
