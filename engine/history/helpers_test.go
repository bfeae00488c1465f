package history_test

import (
	"bytes"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"apollo/engine"
	"apollo/engine/history"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// testEpoch is the fake clock's start: runs made with it have fixed log
// names and timestamps.
var testEpoch = time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)

// testClock returns a clock that starts at base and moves 1ms at each call,
// so that records are ordered and timestamps fixed for a given sequence of
// calls.
func testClock(base time.Time) func() time.Time {
	var ticks atomic.Int64
	return func() time.Time { return base.Add(time.Duration(ticks.Add(1)) * time.Millisecond) }
}

// runPipeline writes yaml to dir/pipeline.yaml and runs it with the real
// engine, its state in dir/.apollo: the runs history reads are made as
// apollo run makes them. It returns the run's error, the replayed log (nil
// when none was written) and what the run printed.
//
//lint:ignore ST1008 the error first, as the tests read it: err, state, output
func runPipeline(t *testing.T, dir, yaml string, ro engine.RunOptions, opts engine.Options) (error, *eventlog.State, string) {
	t.Helper()
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	opts.StateDir = filepath.Join(dir, ".apollo")
	opts.Workdir = dir
	opts.Stdout = &out
	opts.Progress = engine.ProgressPlain
	opts.KillGrace = 200 * time.Millisecond
	if ro.TaskID == "" {
		ro.TaskID = "t"
	}
	err := engine.New(opts).Run(t.Context(), path, ro)
	log, lerr := statedir.Dir{Root: opts.StateDir}.LatestLog(ro.TaskID)
	if lerr != nil || log == "" {
		return err, nil, out.String()
	}
	st, _, rerr := statedir.Replay(log, ro.TaskID, nil)
	if rerr != nil {
		t.Fatalf("log does not read back: %v", rerr)
	}
	return err, st, out.String()
}

// runsOf reads the state folder of engine options as apollo's read-only
// commands do, with the same clock and output.
func runsOf(o engine.Options) history.Runs {
	h := history.Runs{Dir: statedir.Dir{Root: o.StateDir}, Stdout: o.Stdout, Stderr: o.Stderr}
	if o.Clock != nil {
		h.Now = o.Clock.Now
	}
	return h
}
