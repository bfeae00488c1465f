package engine

import (
	"errors"
	"fmt"
	"strings"

	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// noteUnfinished tells the user, when this run starts a new task under the
// default task id (<task_name>-<task_date>), that the newest earlier task
// of the same pipeline in the state folder was left unfinished and no
// runner holds it: a run killed at 23:59 and run again after midnight
// starts the new day's task, and without this note nobody would learn that
// the old one stopped halfway, or how to carry it on. It says what was cut
// off and the command that resumes it; it changes nothing.
func (r *taskRun) noteUnfinished() {
	t := r.t
	prefix := t.p.TaskName + "-"
	logs, err := t.dir.NewestFirst("")
	if err != nil {
		return
	}
	for _, lf := range logs {
		date, ok := strings.CutPrefix(lf.TaskID, prefix)
		if lf.TaskID == t.id || !ok || !pipeline.IsDate(date) || !lf.Regular || lf.Archived {
			continue
		}
		// The newest other day's task of this pipeline: the one a rerun
		// was most likely meant to carry on.
		if _, held := eventlog.Holder(t.dir.Lock(lf.TaskID)); held {
			return // still running: not left behind
		}
		st, err := replayQuickly(t.dir, lf)
		if err != nil || st.Start == nil || st.Start.TaskName != t.p.TaskName || st.Summary != nil {
			return // unreadable (inspect says why), another pipeline's, or ended
		}
		var dirty, failed []string
		for _, id := range st.Order {
			switch s := st.Steps[id]; {
			case s.Dirty:
				dirty = append(dirty, id)
			case s.Status == eventlog.Failed:
				failed = append(failed, id)
			}
		}
		what := "it stopped before it ended"
		switch {
		case len(dirty) > 0:
			what = "cut off by a crash at step(s) " + nameList(dirty)
		case len(failed) > 0:
			what = "step(s) " + nameList(failed) + " failed"
		}
		fmt.Fprintf(r.e.opts.Stderr, "apollo: note: task %s of this pipeline is unfinished (%s) and no runner holds it; "+
			"this run starts task %s. To carry that one on, run the same command with --task-id %s\n",
			lf.TaskID, what, t.id, lf.TaskID)
		return
	}
}

// replayQuickly replays the log lf from its task's snapshot when that
// matches it, else whole: a note must not cost a big log's full replay.
func replayQuickly(dir statedir.Dir, lf statedir.LogFile) (*eventlog.State, error) {
	st, opts := eventlog.NewState(lf.TaskID), eventlog.ReadOptions{TaskID: lf.TaskID}
	if snap, err := eventlog.LoadSnapshot(dir.Snapshot(lf.TaskID), lf.Path, lf.TaskID); err == nil {
		st, opts.Offset, opts.Seq = snap.State, snap.Offset, snap.Seq
	}
	_, err := eventlog.Read(lf.Path, opts, func(r *eventlog.Record) error {
		st.Apply(r)
		return nil
	})
	return st, err
}

// errFirstRecord stops a read after the log's first record.
var errFirstRecord = errors.New("first record read")

// resumedTaskDate is the task_date a task named by --task-id was started
// with, when it has a log and neither --var nor the pipeline's vars set
// task_date: a task keeps its date, so that the run that carries it on
// after midnight renders its steps as the run that began it did, rather
// than taking today's and finding every succeeded step changed. "" when
// the date is the usual default (today): a new task, or --fresh.
func (e *Engine) resumedTaskDate(p *pipeline.Pipeline, ro RunOptions, overrides map[string]string) string {
	if ro.TaskID == "" || ro.Fresh || ro.log != "" || ro.inherited != nil {
		return "" // --fresh starts the task over: today's date, as a new task
	}
	if _, set := overrides["task_date"]; set {
		return ""
	}
	if _, set := p.Vars["task_date"]; set {
		return ""
	}
	path, err := statedir.Dir{Root: e.opts.StateDir}.LatestLog(ro.TaskID)
	if err != nil || path == "" {
		return ""
	}
	var date string
	_, _ = eventlog.Read(path, eventlog.ReadOptions{TaskID: ro.TaskID}, func(r *eventlog.Record) error {
		if r.Start != nil {
			date = r.Start.Vars["task_date"]
		}
		return errFirstRecord
	})
	if !pipeline.IsDate(date) {
		return ""
	}
	return date
}
