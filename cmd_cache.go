package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/pflag"

	"apollo/engine/cache"
	"apollo/engine/completion"
	"apollo/engine/history"
	"apollo/engine/textfmt"
	"apollo/engine/usage"
)

func cacheCommand() *command[*cacheOptions] {
	return &command[*cacheOptions]{
		about: about{name: "cache", summary: "list (ls) or remove (gc) the results of steps with cache: kept in the state folder",
			usage: "apollo cache ls [--pipeline NAME] [--json] [--state-dir DIR]\n" +
				"  apollo cache gc [--all | --older-than AGE] [--pipeline NAME] [--dry-run] [--json] [--state-dir DIR]",
			example: "  apollo cache ls\n  apollo cache gc --older-than 30d\n  apollo cache gc --all --pipeline daily_data_pipeline",
			json:    cacheJSONDoc, argKind: completion.ArgWords, argWords: []string{"ls", "gc"}},
		nargs: positional{1, 1, "expected ls or gc"},
		flags: newCacheOptions,
		run:   runCache,
	}
}

// cacheJSONDoc documents apollo cache's --json output.
const cacheJSONDoc = `JSON (--json), one object:
  ls: {"entries": [entry]}
  gc: {"dry_run": bool, "removed": [entry], "broken"?: [files], "blobs", "bytes", "kept"}
  entry: {"v", "key", "task_name", "step", "task_id", "created", "input_digest", "definition_digest",
          "user_key_digest"?, "upstream"?: {step: output digest}, "inputs"?: [file], "output_digest",
          "output"?, "outputs"?: [file]}
  file: {"path", "digest", "size", "mode"?}
`

// cacheOptions are the flags of apollo cache.
type cacheOptions struct {
	taskName  string
	all       bool
	olderThan string
	dryRun    bool
	json      bool
	stateDir  string
}

// newCacheOptions returns apollo cache's options, bound to the flags it adds to fs.
func newCacheOptions(fs *pflag.FlagSet) *cacheOptions {
	o := new(cacheOptions)
	fs.StringVar(&o.taskName, "pipeline", "", "only the results of the pipeline with this task_name")
	fs.BoolVar(&o.all, "all", false, "gc: remove every result")
	fs.StringVar(&o.olderThan, "older-than", "", "gc: remove the results made longer ago than this: 30d, 12h, 90m")
	fs.BoolVar(&o.dryRun, "dry-run", false, "gc: print what would be removed, and remove nothing")
	fs.BoolVar(&o.json, "json", false, "print the result as JSON")
	stateDirFlag(fs, &o.stateDir)
	return o
}

// runCache lists or removes cached results.
func runCache(_ context.Context, o *cacheOptions, in invocation) error {
	store := cache.New(o.stateDir, nil)
	switch in.args[0] {
	case "ls":
		for _, f := range []string{"all", "older-than", "dry-run"} {
			if in.changed(f) {
				return &usage.Error{Msg: fmt.Sprintf("cache ls: --%s goes with cache gc", f)}
			}
		}
		entries, bad := store.List()
		for _, err := range bad {
			fmt.Fprintf(in.stderr, "apollo: %v\n", err)
		}
		entries = only(entries, o.taskName)
		if o.json {
			if entries == nil {
				entries = []*cache.Entry{} // [], not null
			}
			return textfmt.WriteJSON(in.stdout, map[string]any{"entries": entries})
		}
		writeEntries(in.stdout, entries)
		return nil
	case "gc":
		opts := cache.GCOptions{All: o.all, TaskName: o.taskName, Now: time.Now(), DryRun: o.dryRun}
		if o.olderThan != "" {
			if o.all {
				return &usage.Error{Msg: "cache gc: --all and --older-than do not go together: pick one"}
			}
			age, err := history.ParseAge(o.olderThan)
			if err != nil {
				return &usage.Error{Msg: "cache gc: --older-than: " + err.Error()}
			}
			opts.OlderThan = age
		}
		res, err := store.GC(opts)
		if err != nil {
			return fmt.Errorf("cache gc: %w", err)
		}
		if o.json {
			return textfmt.WriteJSON(in.stdout, struct {
				DryRun bool `json:"dry_run"`
				*cache.GCResult
			}{o.dryRun, res})
		}
		writeGC(in.stdout, res, o.dryRun)
		return nil
	}
	return &usage.Error{Msg: fmt.Sprintf("cache: %q: expected ls or gc\nUsage: apollo cache ls|gc [flags]", in.args[0])}
}

// only keeps the entries of the pipeline taskName ("" keeps all).
func only(entries []*cache.Entry, taskName string) []*cache.Entry {
	if taskName == "" {
		return entries
	}
	var out []*cache.Entry
	for _, e := range entries {
		if e.TaskName == taskName {
			out = append(out, e)
		}
	}
	return out
}

// writeEntries prints one line per cached result, newest first per step.
func writeEntries(w io.Writer, entries []*cache.Entry) {
	if len(entries) == 0 {
		fmt.Fprintln(w, "no cached results")
		return
	}
	fmt.Fprintf(w, "%-20s %-20s %-20s %-19s %5s %9s  %s\n", "PIPELINE", "STEP", "FROM TASK", "MADE", "FILES", "SIZE", "KEY")
	for _, e := range entries {
		fmt.Fprintf(w, "%-20s %-20s %-20s %-19s %5d %9s  %s\n", e.TaskName, e.Step, e.TaskID,
			e.Created.Local().Format("2006-01-02 15:04:05"), len(e.Outputs), textfmt.Bytes(e.Bytes()), shortKey(e.Key))
	}
}

func shortKey(key string) string {
	if len(key) > len("sha256:")+12 {
		return key[:len("sha256:")+12]
	}
	return key
}

func writeGC(w io.Writer, res *cache.GCResult, dryRun bool) {
	verb := "removed"
	if dryRun {
		verb = "would remove"
	}
	for _, e := range res.Entries {
		fmt.Fprintf(w, "%s %s/%s from task %s (%s)\n", verb, e.TaskName, e.Step, e.TaskID, e.Created.Local().Format("2006-01-02 15:04:05"))
	}
	for _, f := range res.Broken {
		fmt.Fprintf(w, "%s %s: unreadable, or its saved files are gone\n", verb, f)
	}
	fmt.Fprintf(w, "%s %d result(s) and %d unused file(s) (%s); %d result(s) kept\n",
		verb, len(res.Entries)+len(res.Broken), res.Blobs, textfmt.Bytes(res.Bytes), res.Kept)
}
