package main

import (
	"context"

	"github.com/spf13/pflag"

	"apollo/engine/history"
	"apollo/engine/usage"
)

func gcCommand() *command[*gcOptions] {
	return &command[*gcOptions]{
		about: about{name: "gc", summary: "archive (gzip) the logs of finished runs older than a limit, and remove their outputs",
			usage:   "apollo gc --older-than AGE [--archive DIR] [--include-unfinished] [--dry-run] [--json] [--state-dir DIR]",
			example: "  apollo gc --older-than 30d --dry-run\n  apollo gc --older-than 30d\n  apollo gc --older-than 12h --archive /mnt/backup/apollo",
			json:    history.GCJSONDoc},
		nargs: positional{0, 0, "takes no arguments"},
		flags: newGCOptions,
		run:   runGC,
	}
}

// gcOptions are the flags of apollo gc.
type gcOptions struct {
	olderThan  string
	archive    string
	dryRun     bool
	unfinished bool
	json       bool
	stateDir   string
}

// newGCOptions returns apollo gc's options, bound to the flags it adds to fs.
func newGCOptions(fs *pflag.FlagSet) *gcOptions {
	o := new(gcOptions)
	fs.StringVar(&o.olderThan, "older-than", "", "archive finished runs whose last event is older than this: 30d, 12h, 90m, 1h30m (required)")
	fs.StringVar(&o.archive, "archive", "", "folder for the compressed logs (default <state-dir>/archive, where inspect and logs find them)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print what would be archived and removed, and change nothing")
	fs.BoolVar(&o.unfinished, "include-unfinished", false, "archive tasks whose newest run could still be resumed (interrupted or cut off) too")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON")
	stateDirFlag(fs, &o.stateDir)
	return o
}

// runGC archives the finished runs older than o.olderThan.
func runGC(_ context.Context, o *gcOptions, in invocation) error {
	if o.olderThan == "" {
		return &usage.Error{Msg: "gc: --older-than is required: say how old a finished run must be to be archived, like --older-than 30d"}
	}
	age, err := history.ParseAge(o.olderThan)
	if err != nil {
		return &usage.Error{Msg: "gc: --older-than: " + err.Error()}
	}
	res, err := runsIn(o.stateDir, in).GC(history.GCOptions{OlderThan: age, Archive: o.archive, DryRun: o.dryRun,
		IncludeUnfinished: o.unfinished})
	if err != nil {
		return err
	}
	if o.json {
		return history.WriteGCJSON(in.stdout, res)
	}
	history.WriteGC(in.stdout, res)
	return nil
}
