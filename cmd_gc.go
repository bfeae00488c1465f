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
			usage: "apollo gc --older-than AGE [--archive DIR] [--include-unfinished] [--dry-run] [--json] [--state-dir DIR]\n" +
				"       apollo gc --hub URLS --older-than AGE [--archive DIR] [--include-unfinished] [--dry-run] [--json] [--state-dir DIR]",
			example: "  apollo gc --older-than 30d --dry-run\n  apollo gc --older-than 30d\n  apollo gc --older-than 12h --archive /mnt/backup/apollo\n" +
				"  apollo gc --hub nats://h1:4222 --older-than 30d --archive /mnt/backup/apollo   # the hub's logs: archived here, then dropped from the hub",
			json: history.GCJSONDoc},
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
	hub        hubFlags
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
	o.hub.addFlags(fs, "archive the finished tasks whose log is in this hub (comma-separated URLs) into --archive, then drop them from the hub")
	return o
}

// runGC archives the finished runs older than o.olderThan.
func runGC(ctx context.Context, o *gcOptions, in invocation) error {
	if o.olderThan == "" {
		return &usage.Error{Msg: "gc: --older-than is required: say how old a finished run must be to be archived, like --older-than 30d"}
	}
	age, err := history.ParseAge(o.olderThan)
	if err != nil {
		return &usage.Error{Msg: "gc: --older-than: " + err.Error()}
	}
	if o.hub.urls != "" {
		return gcHub(ctx, o, age, in)
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
