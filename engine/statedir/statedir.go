package statedir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"apollo/eventlog"
)

// Dir is a state folder (docs/spec.md §3):
//
//	logs/task_<task_id>_<start_unix_seconds>.jsonl   the event log of one task run
//	logs/task_<task_id>.lock                          held (flock) by the runner
//	state/<task_id>.snapshot.json                     replay snapshot
//	artifacts/<task_id>/                              {{artifacts_dir}}
//	output/<task_id>/<step_id>.<retry_count>.log      a step attempt's stdout+stderr
//	archive/task_<task_id>_<start>.jsonl.gz           a log archived by apollo gc
type Dir struct{ Root string }

// Logs is the folder of the event logs and their locks.
func (d Dir) Logs() string { return filepath.Join(d.Root, "logs") }

// Lock is the lock file of a task.
func (d Dir) Lock(taskID string) string { return filepath.Join(d.Logs(), "task_"+taskID+".lock") }

// Log is the path of the task's log started at startUnix.
func (d Dir) Log(taskID string, startUnix int64) string {
	return filepath.Join(d.Logs(), fmt.Sprintf("task_%s_%d%s", taskID, startUnix, liveExt))
}

// Artifacts is the task's {{artifacts_dir}}.
func (d Dir) Artifacts(taskID string) string { return filepath.Join(d.Root, "artifacts", taskID) }

// Outputs is the folder of the task's step outputs.
func (d Dir) Outputs(taskID string) string { return filepath.Join(d.Root, "output", taskID) }

// Output is the output file of one step attempt.
func (d Dir) Output(taskID, stepID string, retry int) string {
	return filepath.Join(d.Outputs(taskID), stepID+"."+strconv.Itoa(retry)+".log")
}

// Snapshot is the task's replay snapshot.
func (d Dir) Snapshot(taskID string) string {
	return filepath.Join(d.Root, "state", taskID+".snapshot.json")
}

// HubKeys is the folder of the task's run keys with a hub: the secret of
// each attempt a coordinator dispatches is derived from its run's key.
func (d Dir) HubKeys(taskID string) string { return filepath.Join(d.Root, "hub", taskID) }

// HubKey is the key of one run (its log's run_nonce) of the task.
func (d Dir) HubKey(taskID, run string) string { return filepath.Join(d.HubKeys(taskID), run+".key") }

// Archive is where apollo gc puts compressed logs by default, and where
// inspect and logs look for a task that has no live log.
func (d Dir) Archive() string { return filepath.Join(d.Root, "archive") }

const (
	liveExt    = ".jsonl"
	archiveExt = ".jsonl.gz"
)

// LogFile is one task log found in a folder.
type LogFile struct {
	Path   string
	TaskID string
	// Start is the start_unix_seconds of its name: logs of a task sort by it.
	Start int64
	// Archived is set for a log compressed by apollo gc (.jsonl.gz).
	Archived bool
	// Regular is false for an entry that is not a regular file (a folder
	// or a link where a log should be).
	Regular bool
}

// ParseLogName parses a log file's name, task_<task_id>_<start>.jsonl or,
// archived, task_<task_id>_<start>.jsonl.gz. A task id may itself hold
// "_<digits>", so the start is the last such part.
func ParseLogName(name string) (taskID string, start int64, archived bool, ok bool) {
	rest, ok := strings.CutPrefix(name, "task_")
	if !ok {
		return "", 0, false, false
	}
	switch {
	case strings.HasSuffix(rest, archiveExt):
		rest, archived = strings.TrimSuffix(rest, archiveExt), true
	case strings.HasSuffix(rest, liveExt):
		rest = strings.TrimSuffix(rest, liveExt)
	default:
		return "", 0, false, false
	}
	i := strings.LastIndexByte(rest, '_')
	if i <= 0 {
		return "", 0, false, false
	}
	digits := rest[i+1:]
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return "", 0, false, false
	}
	start, err := strconv.ParseInt(digits, 10, 64)
	if err != nil {
		return "", 0, false, false
	}
	return rest[:i], start, archived, true
}

// scan lists the logs in folder (live ones, or archived ones when archived
// is set) whose task id passes keep, oldest first. A missing folder holds none.
func scan(folder string, archived bool, keep func(taskID string) bool) ([]LogFile, error) {
	entries, err := os.ReadDir(folder)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list logs in %s: %w", folder, err)
	}
	var out []LogFile
	for _, e := range entries {
		id, start, arch, ok := ParseLogName(e.Name())
		if !ok || arch != archived || !keep(id) {
			continue
		}
		out = append(out, LogFile{Path: filepath.Join(folder, e.Name()), TaskID: id, Start: start,
			Archived: arch, Regular: e.Type().IsRegular()})
	}
	// sort.Slice, not slices.SortFunc: the generic sort would be compiled
	// anew for LogFile's shape, 12 KB of binary for a handful of files.
	sort.Slice(out, func(i, j int) bool { return compareStart(out[i], out[j]) < 0 })
	return out, nil
}

func compareStart(a, b LogFile) int {
	switch {
	case a.Start < b.Start:
		return -1
	case a.Start > b.Start:
		return 1
	}
	return strings.Compare(a.TaskID, b.TaskID)
}

// TaskLogs lists the live logs of a task, oldest first.
func (d Dir) TaskLogs(taskID string) ([]LogFile, error) {
	return scan(d.Logs(), false, func(id string) bool { return id == taskID })
}

// ArchivedLogs lists the logs of a task archived in folder, oldest first.
func ArchivedLogs(folder, taskID string) ([]LogFile, error) {
	return scan(folder, true, func(id string) bool { return id == taskID })
}

// AllLogs lists every live log with a valid task id, and the archived ones
// in archive unless archive is "".
func (d Dir) AllLogs(archive string) ([]LogFile, error) {
	valid := func(id string) bool { return ValidTaskID(id) == nil }
	out, err := scan(d.Logs(), false, valid)
	if err != nil || archive == "" {
		return out, err
	}
	arch, err := scan(archive, true, valid)
	return append(out, arch...), err
}

// NewestFirst lists the task logs in the logs folder, and in archive
// unless it is "", newest first: by start, then by task id, a live log
// before its archived twin.
func (d Dir) NewestFirst(archive string) ([]LogFile, error) {
	logs, err := d.AllLogs(archive)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(logs, func(i, j int) bool { // sort.Slice: see scan
		a, b := logs[i], logs[j]
		if a.Start != b.Start {
			return a.Start > b.Start
		}
		if a.TaskID != b.TaskID {
			return a.TaskID < b.TaskID
		}
		return !a.Archived && b.Archived
	})
	return logs, nil
}

// TaskIDs lists the tasks that have a log in the logs folder, and in
// archive unless it is "", each once, in NewestFirst's order: from the
// logs' names alone.
func (d Dir) TaskIDs(archive string) ([]string, error) {
	logs, err := d.NewestFirst(archive)
	seen := map[string]bool{}
	var ids []string
	for _, l := range logs {
		if !seen[l.TaskID] {
			seen[l.TaskID] = true
			ids = append(ids, l.TaskID)
		}
	}
	return ids, err
}

// KnownTasks lists the tasks with a log, live or in the state folder's
// archive, newest first: what an unknown task id is compared with for a
// suggestion.
func (d Dir) KnownTasks() []string {
	ids, _ := d.TaskIDs(d.Archive())
	return ids
}

// LatestLog returns the newest live log of a task, or "" if it has none.
func (d Dir) LatestLog(taskID string) (string, error) {
	logs, err := d.TaskLogs(taskID)
	if err != nil || len(logs) == 0 {
		return "", err
	}
	return logs[len(logs)-1].Path, nil
}

// FindLog returns the newest log of a task: the live one in the logs
// folder, else the newest archived one in the archive folder (archived is
// then true). path is "" when the task has neither.
func (d Dir) FindLog(taskID string) (path string, archived bool, err error) {
	p, err := d.LatestLog(taskID)
	if err != nil || p != "" {
		return p, false, err
	}
	logs, err := ArchivedLogs(d.Archive(), taskID)
	if err != nil || len(logs) == 0 {
		return "", false, err
	}
	return logs[len(logs)-1].Path, true, nil
}

// RemoveUnfinished removes what a crash while writing one of the task's
// files left behind, under the task's lock: a log's temporary file that was
// never renamed into place (it holds at most an unsynced TASK_START and never
// a record of a step; "<log>.new" from older versions too), and a
// snapshot's.
func (d Dir) RemoveUnfinished(taskID string) {
	logs := filepath.Join(d.Logs(), "task_"+taskID+"_*"+liveExt)
	for _, pattern := range []string{eventlog.TempPattern(logs), logs + ".new", eventlog.TempPattern(d.Snapshot(taskID))} {
		leftovers, _ := filepath.Glob(pattern)
		for _, f := range leftovers {
			os.Remove(f)
		}
	}
}

// ArchiveName is the file name apollo gc gives the archive of the log
// named logName.
func ArchiveName(logName string) string { return logName + ".gz" }

// IsArchive reports whether path names a log archived by apollo gc.
func IsArchive(path string) bool { return strings.HasSuffix(path, archiveExt) }

// OutputAttempts lists, in order, the attempts of a step that have an output
// file.
func (d Dir) OutputAttempts(taskID, stepID string) ([]int, error) {
	entries, err := os.ReadDir(d.Outputs(taskID))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list outputs: %w", err)
	}
	var out []int
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), stepID+".")
		if !ok {
			continue
		}
		num, ok := strings.CutSuffix(rest, ".log")
		if n, err := strconv.Atoi(num); ok && err == nil && n >= 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// NotFoundError says a task has no log in the state folder: an unknown
// task id, a usage error.
type NotFoundError struct {
	TaskID   string
	StateDir string
	// LogFile is set where a log file's path may be given instead.
	LogFile bool
	// Suggestion is a task id with a log that TaskID may be a typo of, or
	// "".
	Suggestion string
}

func (e *NotFoundError) Error() string {
	list := "apollo list"
	if filepath.Clean(e.StateDir) != ".apollo" {
		list += " --state-dir " + e.StateDir
	}
	or := ""
	if e.LogFile {
		or = ", or pass a log file"
	}
	hint := ""
	if e.Suggestion != "" {
		hint = fmt.Sprintf(" (did you mean %q?)", e.Suggestion)
	}
	return fmt.Sprintf("task %q has no log in %s: no such task id here%s; run `%s` to see the task ids%s",
		e.TaskID, e.StateDir, hint, list, or)
}
