package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/pflag"

	"apollo/engine/history"
	"apollo/engine/statedir"
	"apollo/engine/usage"
)

func listCommand() *command[listOptions] {
	return &command[listOptions]{
		about: about{name: "list", summary: "list the task runs in the state folder, newest first",
			usage:   "apollo list [--json] [--ids] [--all] [--state-dir DIR]",
			example: "  apollo list\n  apollo list --json | jq -r '.runs[] | select(.status == \"failed\") | .task_id'\n  apollo list --ids --all",
			json:    listJSONDoc},
		nargs:    positional{0, 0, "takes no arguments"},
		addFlags: (*listOptions).addFlags,
		run:      runList,
	}
}

// listOptions are the flags of apollo list.
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

// runList prints the task runs of o.stateDir.
func runList(_ context.Context, o *listOptions, in invocation) error {
	if o.json && o.ids {
		return &usage.Error{Msg: "list: --json and --ids do not go together: pick one output"}
	}
	runs, err := history.Runs{Dir: statedir.Dir{Root: o.stateDir}}.List(history.ListOptions{All: o.all})
	if err != nil {
		return err
	}
	switch {
	case o.json:
		return history.WriteListJSON(in.stdout, runs)
	case o.ids:
		for _, id := range history.TaskIDs(runs) {
			fmt.Fprintln(in.stdout, id)
		}
	default:
		history.WriteList(in.stdout, runs, time.Local)
	}
	return nil
}

// listJSONDoc documents list --json's output ({"runs": [history.RunInfo]}),
// shown by --help and checked against it by TestJSONDocs. Fields marked ?
// are left out when empty.
const listJSONDoc = `JSON (--json), one object:
  {"runs": [{"task_id", "task_name", "log", "archived": bool,
             "status": "running"|"succeeded"|"failed"|"interrupted"|"unfinished"|"corrupt",
             "pid"? (the runner's), "started_at", "last_event", "duration_ms", "invocations",
             "steps": {"total", "done", "failed", "running", "pending"}, "error"? (corrupt)}]}
  runs are newest first; one entry per log (a task run with --fresh has several).
  duration_ms is the time its invocations ran (to now while running); done counts
  SUCCESS and SKIPPED steps. Times are RFC 3339 UTC.
`
