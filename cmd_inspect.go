package main

import (
	"context"
	"io"
	"time"

	"github.com/spf13/pflag"

	"apollo/engine"
)

type inspectOptions struct {
	json     bool
	stateDir string
}

func (o *inspectOptions) addFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.json, "json", false, "print the report as JSON")
	stateDirFlag(fs, &o.stateDir)
}

func cmdInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("inspect")
	var o inspectOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &engine.UsageError{Msg: "inspect: expected a task id or a log file\nUsage: " + c.usage}
	}
	e := newEngine(o.stateDir, engine.ProgressQuiet, stdout, stderr)
	rep, err := e.Inspect(fs.Arg(0))
	if err != nil {
		return err
	}
	if o.json {
		return engine.WriteReportJSON(stdout, rep)
	}
	engine.WriteReport(stdout, rep, time.Now())
	return nil
}

// inspectJSONDoc documents inspect --json's output, shown by --help. Fields marked ? are
// left out when empty.
const inspectJSONDoc = `JSON (--json), one object:
  {"task_id", "task_name", "log", "pipeline",
   "status": "complete"|"failed"|"interrupted"|"running"|"unfinished",
   "runner": {"held": bool, "pid"?}, "invocations", "started_at", "last_event",
   "steps": [{"id", "status", "attempts", "retry_count", "dirty": bool, "optional": bool,
              "depends_on": [ids], "last_timestamp", "duration_ms", "last_error", "output_digest"?}],
   "next": [step ids a run would start first], "markers": [{"name", "state"}],
   "torn_tail_bytes"?, "archived"? (true: read from apollo gc's archive), "records"}
  Times are RFC 3339 UTC.
`
