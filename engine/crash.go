package engine

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"apollo/eventlog"
)

// Crash points let tests kill the runner at exact places, as kill -9 or a
// power cut would, and check what the next run makes of it. They cost one
// nil check when unused.
//
//	APOLLO_CRASH_AT=POINT:N     SIGKILL this process at the Nth hit of POINT
//	APOLLO_CRASH_TRACE=FILE     append every point hit to FILE, one a line
//
// The points: the event log's "write:<EVENT>" (a record written, not yet
// fsynced) and "fsync:<EVENT>" (the fsync that made it durable returned), for
// every event type; "body:after" (a step's body ended, its STEP_END not yet
// written); "cleanup:before" and "cleanup:after" (around a cleanup hook, its
// CLEANUP record not yet written); "marker:pending" (a MARKER pending is
// durable, the guarded code has not run) and "marker:done"; "summary:before"
// (every step settled, the TASK_SUMMARY not yet written); "subpipe:before"
// and "subpipe:after" (a run: step's STEP_START is durable and its child
// task not yet run; the child task has ended, the STEP_END not yet
// written); "cache:restored" (a cached step's outputs restored, its
// STEP_END not yet written) and "cache:saved" (a cached step's STEP_END
// durable and its blobs saved, its cache entry not yet written).
const (
	crashAtEnv    = "APOLLO_CRASH_AT"
	crashTraceEnv = "APOLLO_CRASH_TRACE"
)

// crashHook builds the hook of an engine from the two variables' values:
// nil when neither is set.
func crashHook(at, trace string) func(point string) {
	if at == "" && trace == "" {
		return nil
	}
	var want string
	n := int64(0)
	if at != "" {
		i := strings.LastIndexByte(at, ':')
		if i > 0 {
			if k, err := strconv.ParseInt(at[i+1:], 10, 64); err == nil && k > 0 {
				want, n = at[:i], k
			}
		}
		if want == "" {
			want, n = at, 1
		}
	}
	var mu sync.Mutex
	hits := map[string]int64{}
	return func(point string) {
		mu.Lock()
		hits[point]++
		k := hits[point]
		if trace != "" {
			// O_APPEND and one write a line: a kill never leaves half a line.
			if f, err := os.OpenFile(trace, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); err == nil {
				f.WriteString(point + "\n")
				f.Close()
			}
		}
		if point == want && k == n {
			// No deferred code, no buffered output: the same as kill -9.
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			for {
				time.Sleep(time.Hour) // not select{}: the runtime could call that a deadlock
			}
		}
		mu.Unlock()
	}
}

// fs is the engine's file-system seam.
func (e *Engine) fs() eventlog.FS {
	if e.opts.FS == nil {
		return eventlog.OS{}
	}
	return e.opts.FS
}

// crash calls the engine's crash hook at a named point.
func (e *Engine) crash(point string) {
	if e.opts.Crash != nil {
		e.opts.Crash(point)
	}
}
