package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"

	"apollo/engine"
)

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

// gcJSONDoc documents gc --json's output, shown by --help. Fields marked ? are
// left out when empty.
const gcJSONDoc = `JSON (--json), one object:
  {"dry_run": bool, "older_than" (a Go duration), "cutoff" (RFC 3339), "archive",
   "archived": [{"task_id", "log", "archive" (the .jsonl.gz), "status", "last_event",
                 "bytes", "archived_bytes" (0 in a dry run)}],
   "removed": [output folders and snapshots],
   "kept": [{"task_id", "log", "reason": "running"|"unfinished"|"recent"|"corrupt", "detail"}]}
`
