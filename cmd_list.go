package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"apollo/engine"
)

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

// listJSONDoc documents list --json's output, shown by --help. Fields marked ? are
// left out when empty.
const listJSONDoc = `JSON (--json), one object:
  {"runs": [{"task_id", "task_name", "log", "archived": bool,
             "status": "running"|"succeeded"|"failed"|"interrupted"|"unfinished"|"corrupt",
             "pid"? (the runner's), "started_at", "last_event", "duration_ms", "invocations",
             "steps": {"total", "done", "failed", "running", "pending"}, "error"? (corrupt)}]}
  runs are newest first; one entry per log (a task run with --fresh has several).
  duration_ms is the time its invocations ran (to now while running); done counts
  SUCCESS and SKIPPED steps. Times are RFC 3339 UTC.
`
