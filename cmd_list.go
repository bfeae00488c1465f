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

func listCommand() *command[*listOptions] {
	return &command[*listOptions]{
		about: about{name: "list", summary: "list the task runs in the state folder, newest first",
			usage:   "apollo list [--json] [--ids] [--all] [--state-dir DIR] | apollo list --hub URLS [--ids]",
			example: "  apollo list\n  apollo list --json | jq -r '.runs[] | select(.status == \"failed\") | .task_id'\n  apollo list --ids --all",
			json:    history.ListJSONDoc},
		nargs: positional{0, 0, "takes no arguments"},
		flags: newListOptions,
		run:   runList,
	}
}

// listOptions are the flags of apollo list.
type listOptions struct {
	json     bool
	ids      bool
	all      bool
	stateDir string
	hub      hubFlags
}

// newListOptions returns apollo list's options, bound to the flags it adds to fs.
func newListOptions(fs *pflag.FlagSet) *listOptions {
	o := new(listOptions)
	fs.BoolVar(&o.json, "json", false, "print the runs as JSON")
	fs.BoolVar(&o.ids, "ids", false, "print only the task ids, one a line (for scripts and shell completion)")
	fs.BoolVar(&o.all, "all", false, "also list the runs that apollo gc archived in <state-dir>/archive")
	stateDirFlag(fs, &o.stateDir)
	o.hub.addFlags(fs, "list the tasks whose log is in the hub (comma-separated URLs), from its task index")
	return o
}

// runList prints the task runs of o.stateDir.
func runList(ctx context.Context, o *listOptions, in invocation) error {
	if o.json && o.ids {
		return &usage.Error{Msg: "list: --json and --ids do not go together: pick one output"}
	}
	if o.hub.urls != "" {
		if o.json || o.all {
			return &usage.Error{Msg: "list --hub prints the hub's task index, as a table or with --ids; --json and --all read a state folder"}
		}
		return listHub(ctx, o, in)
	}
	h := history.Runs{Dir: statedir.Dir{Root: o.stateDir}}
	lo := history.ListOptions{All: o.all}
	if o.ids {
		ids, err := h.TaskIDs(lo)
		if err != nil {
			return err
		}
		for _, id := range ids {
			fmt.Fprintln(in.stdout, id)
		}
		return nil
	}
	runs, err := h.List(lo)
	if err != nil {
		return err
	}
	if o.json {
		return history.WriteListJSON(in.stdout, runs)
	}
	history.WriteList(in.stdout, runs, time.Local)
	return nil
}
