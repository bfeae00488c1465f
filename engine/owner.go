package engine

import (
	"fmt"
	"path/filepath"

	"apollo/engine/pipeline"
	"apollo/engine/usage"
	"apollo/eventlog"
)

// A task id belongs to one pipeline (docs/spec.md §2.8): the task_name and
// the file its logs' TASK_START records. Before a run resumes a log, takes
// a task for complete, or copies an earlier log's markers into a new one,
// it checks that the log is its pipeline's: another pipeline's log is
// refused (a usage error, exit 2, naming both), never run in, never taken
// for complete and never a source of markers. A file found at another
// place with the same task_name — moved, renamed, or a copy — is another
// pipeline too, unless --accept-changes says it moved: the run then
// records the move and the log is bound to the new place. The same file
// given by another relative path is the same pipeline. A log of an older
// apollo records no file: its task_name alone is checked. A sub-pipeline's
// task (its id holds statedir.ChildSep, which no user's may) is apollo's:
// when a step starts it anew, earlier logs of another pipeline (the step's
// run: changed) are passed over, not refused.

// pipelineFile is the absolute path of p's file (p.Dir is absolute), so
// that a.yaml, ./a.yaml and ../w/a.yaml are one pipeline. Symbolic links
// are not resolved: a file reached through a link a deployment moves
// (current -> releases/42) keeps its path from one release to the next.
func pipelineFile(p *pipeline.Pipeline) string {
	return filepath.Join(p.Dir, filepath.Base(p.Path))
}

// ownership is what claim found of a log's pipeline.
type ownership struct {
	mine      bool   // the log is t's pipeline's
	movedFrom string // the file the log was bound to, when --accept-changes takes t's file for it moved
}

// claim checks that the log whose latest TASK_START is start belongs to
// t's pipeline. resumed says the run would continue that log; otherwise it
// is an earlier log (complete in the archive, or one whose markers a new
// log would inherit). child says t is a sub-pipeline's task, and accept
// that --accept-changes was given.
func claim(t *task, start *eventlog.StartInfo, resumed, child, accept bool) (ownership, error) {
	if start == nil {
		return ownership{mine: true}, nil
	}
	was := start.PipelineFile
	if was == "" {
		was = start.Pipeline // an older apollo's log: as it was given
	}
	switch {
	case start.TaskName == t.p.TaskName && (start.PipelineFile == "" || start.PipelineFile == t.file):
		return ownership{mine: true}, nil
	case start.TaskName == t.p.TaskName && accept:
		return ownership{mine: true, movedFrom: start.PipelineFile}, nil
	case child && !resumed:
		return ownership{}, nil // a new log of apollo's own task: another pipeline's logs are passed over
	case child:
		// The step's run: names another pipeline than the log it resumes.
		return ownership{}, fmt.Errorf("task %s belongs to pipeline %q (file %s), not to %q (file %s): "+
			"run the parent with --resume-from the step to start it anew", t.id, start.TaskName, was, t.p.TaskName, t.file)
	case start.TaskName != t.p.TaskName:
		return ownership{}, usage.Errorf("task %s belongs to pipeline %q (file %s); %s is pipeline %q: give it another --task-id",
			t.id, start.TaskName, was, t.p.Path, t.p.TaskName)
	}
	return ownership{}, usage.Errorf("task %s was run from pipeline file %s; this is %s (both task_name %q): "+
		"if the file moved, run with --accept-changes; otherwise give it another --task-id",
		t.id, start.PipelineFile, t.file, t.p.TaskName)
}
