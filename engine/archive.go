package engine

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"apollo/engine/statedir"
	"apollo/engine/usage"
	"apollo/eventlog"
)

// A task's earlier logs still count when a run starts a new one: gc may
// have archived its only log, or the user asked for --fresh. What
// at-most-once needs survives both (docs/spec.md §5.9): a task whose
// newest log is archived and complete is complete; and the markers of the
// newest earlier log (idem.once, idem.resource: done, pending or failed)
// are copied into the new log before any step runs, so a side effect that
// ran is never run again unless someone clears its marker (apollo script).

// archivedRun is the newest archived log of a task and its replay.
type archivedRun struct {
	path  string
	state *eventlog.State
}

// newestArchived replays the newest archived log of the task, or returns
// nil when it has none.
func (r *taskRun) newestArchived() (*archivedRun, error) {
	logs, err := statedir.ArchivedLogs(r.t.dir.Archive(), r.t.id)
	if err != nil || len(logs) == 0 {
		return nil, err
	}
	path := logs[len(logs)-1].Path
	st, _, err := statedir.Replay(path, r.t.id, nil)
	if err != nil {
		return nil, fmt.Errorf("task %s: read its archived log: %w", r.t.id, err)
	}
	return &archivedRun{path: path, state: st}, nil
}

// completeInArchive reports, for a task without a live log, whether its
// newest archived run is complete, printing so: such a task has nothing to
// do unless --fresh. --resume-from cannot reopen it without its live log.
func (r *taskRun) completeInArchive() (bool, error) {
	arch, err := r.newestArchived()
	if err != nil || arch == nil || !arch.state.Complete() {
		return false, err
	}
	if mine, err := r.claim(arch.state.Start, false); !mine || err != nil {
		return err != nil, err // another pipeline's run is not this one's, complete or not
	}
	if r.ro.ResumeFrom != "" {
		return true, usage.Errorf("task %s is complete and its log was archived by apollo gc (%s); "+
			"--resume-from needs a live log: run it with --fresh to start over (its markers are kept)", r.t.id, arch.path)
	}
	fmt.Fprintf(r.e.opts.Stdout, "task %s is already complete (its log was archived by apollo gc: %s); nothing to do.\n"+
		"Use --fresh to run it again: its markers still guard the side effects that ran.\n", r.t.id, arch.path)
	return true, nil
}

// earlierMarkers returns the markers of the task's newest earlier log — the
// live one being replaced (--fresh), else the newest archived one — and
// that log's path; none when the task has no earlier log.
func (r *taskRun) earlierMarkers(live string) (map[string]*eventlog.MarkerInfo, string, error) {
	if live != "" {
		st, _, err := statedir.Replay(live, r.t.id, nil)
		if ce, ok := errors.AsType[*eventlog.CorruptError](err); ok {
			// --fresh is the way out of a damaged log: keep the markers
			// read before the damage, and say so.
			fmt.Fprintf(r.e.opts.Stderr, "apollo: warning: %s is damaged at line %d; the new log keeps the markers "+
				"recorded before that line only\n", live, ce.Line)
			err = nil
		}
		if err != nil {
			return nil, "", fmt.Errorf("task %s: read its markers from %s: %w", r.t.id, live, err)
		}
		if mine, err := r.claim(st.Start, false); !mine || err != nil {
			return nil, "", err // another pipeline's markers are not this one's
		}
		return st.Markers, live, nil
	}
	arch, err := r.newestArchived()
	if err != nil || arch == nil {
		return nil, "", err
	}
	if mine, err := r.claim(arch.state.Start, false); !mine || err != nil {
		return nil, "", err
	}
	return arch.state.Markers, arch.path, nil
}

// inheritMarkers appends the earlier log's markers to the new log, durably,
// before any step runs.
func (r *taskRun) inheritMarkers(markers map[string]*eventlog.MarkerInfo, from string) error {
	if len(markers) == 0 {
		return nil
	}
	for _, name := range slices.Sorted(maps.Keys(markers)) {
		m := *markers[name]
		rec := &eventlog.Record{EventType: eventlog.Marker, Status: eventlog.Running, Marker: &m,
			Message: "inherited from " + from}
		if err := r.w.AppendUnsynced(rec); err != nil {
			return err
		}
		r.markers.Observe(rec)
	}
	return r.w.Sync()
}
