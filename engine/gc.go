package engine

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"apollo/eventlog"
)

// GCOptions are the flags of apollo gc.
type GCOptions struct {
	// OlderThan is the age a run's last record must exceed.
	OlderThan time.Duration
	// Archive is the folder for compressed logs; "" means <state-dir>/archive.
	Archive string
	// DryRun reports what would be done and changes nothing.
	DryRun bool
}

// GCResult is what apollo gc did (or, with DryRun, would do).
type GCResult struct {
	DryRun    bool         `json:"dry_run"`
	OlderThan string       `json:"older_than"` // a Go duration: "720h0m0s"
	Cutoff    string       `json:"cutoff"`     // runs whose last record is before this are old
	Archive   string       `json:"archive"`
	Archived  []GCArchived `json:"archived"`
	Removed   []string     `json:"removed"`
	Kept      []GCKept     `json:"kept"`
}

// GCArchived is one log moved into the archive.
type GCArchived struct {
	TaskID        string `json:"task_id"`
	Log           string `json:"log"`
	Archive       string `json:"archive"`
	Status        string `json:"status"` // succeeded, failed or interrupted
	LastEvent     string `json:"last_event"`
	Bytes         int64  `json:"bytes"`
	ArchivedBytes int64  `json:"archived_bytes"` // 0 in a dry run
}

// GCKept is one log that gc leaves alone, and why.
type GCKept struct {
	TaskID string `json:"task_id"`
	Log    string `json:"log"`
	Reason string `json:"reason"` // running, unfinished, recent, corrupt
	Detail string `json:"detail"`
	PID    int    `json:"pid,omitempty"` // the runner's, when running
}

// Reasons why gc keeps a run.
const (
	KeepRunning    = "running"
	KeepUnfinished = "unfinished"
	KeepRecent     = "recent"
	KeepCorrupt    = "corrupt"
)

// archiveDir is where apollo gc puts compressed logs by default, and where
// inspect and logs look for a task that has no live log.
func (l layout) archiveDir() string { return filepath.Join(l.root, "archive") }

var archiveNamePattern = regexp.MustCompile(`^task_(.+)_(\d+)\.jsonl\.gz$`)

// archivedLogs lists the archived logs of a task in dir, oldest first.
func archivedLogs(dir, taskID string) ([]logFile, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list archive: %w", err)
	}
	prefix := "task_" + taskID + "_"
	var out []logFile
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, ".jsonl.gz") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimPrefix(name, prefix), ".jsonl.gz"), 10, 64)
		if err != nil {
			continue // a task whose id extends this one
		}
		out = append(out, logFile{path: filepath.Join(dir, name), startUnix: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].startUnix < out[j].startUnix })
	return out, nil
}

// FindLog returns the newest log of a task: the live one in the logs
// folder, else the newest archived one in <state-dir>/archive (archived is
// then true). path is "" when the task has neither.
func (e *Engine) FindLog(taskID string) (path string, archived bool, err error) {
	lay := layout{root: e.opts.StateDir}
	p, err := lay.latestLog(taskID)
	if err != nil || p != "" {
		return p, false, err
	}
	logs, err := archivedLogs(lay.archiveDir(), taskID)
	if err != nil || len(logs) == 0 {
		return "", false, err
	}
	return logs[len(logs)-1].path, true, nil
}

// isArchive reports whether path names a compressed log.
func isArchive(path string) bool { return strings.HasSuffix(path, ".jsonl.gz") }

// readAnyLog is eventlog.Read for a live log or an archived one. An
// archived log (.jsonl.gz) is decompressed into a temporary file under
// os.TempDir() that is read and then removed: the event log's one parser
// takes a path, and keeping a single parser matters more than the copy.
func readAnyLog(path string, opts eventlog.ReadOptions, visit func(*eventlog.Record) error) (eventlog.Tail, error) {
	if !isArchive(path) {
		return eventlog.Read(path, opts, visit)
	}
	tmp, err := decompressLog(path)
	if err != nil {
		return eventlog.Tail{}, err
	}
	defer os.Remove(tmp)
	tail, err := eventlog.Read(tmp, opts, visit)
	if ce, ok := errors.AsType[*eventlog.CorruptError](err); ok {
		ce.Path = path
	} else if err != nil {
		err = fmt.Errorf("archived log %s: %w", path, err)
	}
	return tail, err
}

// decompressLog writes the content of the gzip file at path to a new
// temporary file and returns its name.
func decompressLog(path string) (string, error) {
	in, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open archived log: %w", err)
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return "", fmt.Errorf("archived log %s: %w", path, err)
	}
	out, err := os.CreateTemp("", "apollo-archived-*.jsonl")
	if err != nil {
		return "", fmt.Errorf("archived log %s: decompress: %w", path, err)
	}
	_, err = io.Copy(out, zr)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = zr.Close()
	}
	if err != nil {
		os.Remove(out.Name())
		return "", fmt.Errorf("archived log %s: decompress: %w", path, err)
	}
	return out.Name(), nil
}

// ParseAge reads a --older-than value: a number of days ("30d", "1.5d"),
// or a Go duration ("12h", "90m", "1h30m").
func ParseAge(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		f, err := strconv.ParseFloat(days, 64)
		if err != nil || f != f || f > 1e6 {
			return 0, fmt.Errorf("%q is not an age: write it like 30d, 12h or 90m", s)
		}
		d = time.Duration(f * float64(24*time.Hour))
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("%q is not an age: write it like 30d, 12h or 90m", s)
		}
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative: an age is at least 0", s)
	}
	return d, nil
}

// logSummary is what gc and list read from one log.
type logSummary struct {
	state   *eventlog.State
	records int
	// spent is the time the log's invocations ran: TASK_START to
	// TASK_SUMMARY each, or to the last record of an invocation cut off.
	spent time.Duration
	// open is the start of the latest invocation when it has no summary.
	open time.Time
	last time.Time
}

// summarizeLog replays a live or archived log.
func summarizeLog(path, taskID string) (*logSummary, error) {
	s := &logSummary{state: eventlog.NewState(taskID)}
	var invStart time.Time
	_, err := readAnyLog(path, eventlog.ReadOptions{TaskID: taskID}, func(r *eventlog.Record) error {
		t := r.Time()
		switch r.EventType {
		case eventlog.TaskStart:
			if !invStart.IsZero() && !s.last.IsZero() {
				s.spent += max(0, s.last.Sub(invStart))
			}
			invStart = t
		case eventlog.TaskSummary:
			if !invStart.IsZero() {
				s.spent += max(0, t.Sub(invStart))
			}
			invStart = time.Time{}
		}
		s.state.Apply(r)
		s.records++
		s.last = t
		return nil
	})
	if err != nil {
		return nil, err
	}
	if !invStart.IsZero() {
		s.open = invStart
	}
	return s, nil
}

// outcome names how a finished log ended.
func outcome(st *eventlog.State) string {
	switch {
	case st.Summary == nil:
		return "unfinished"
	case st.Complete():
		return "succeeded"
	case st.Summary.Summary != nil && st.Summary.Summary.Interrupted:
		return "interrupted"
	}
	return "failed"
}

// GC archives finished runs older than opts.OlderThan: each log is
// compressed into the archive folder, and once a task's newest log is
// archived its output files and snapshot are removed. A task that a runner
// holds, or whose newest log has no TASK_SUMMARY, is never touched. While
// it works on a task, GC holds the task's lock, so no run can start on it.
//
// Archiving is crash-safe: the .gz is written under a temporary name,
// fsynced, renamed and its folder fsynced before the log is removed; a
// crash leaves at worst both copies, and the next gc finishes the job.
// Artifacts (<state-dir>/artifacts) and lock files are left alone.
func (e *Engine) GC(opts GCOptions) (*GCResult, error) {
	lay := layout{root: e.opts.StateDir}
	archive := opts.Archive
	if archive == "" {
		archive = lay.archiveDir()
	}
	cutoff := e.opts.Now().Add(-opts.OlderThan)
	res := &GCResult{DryRun: opts.DryRun, OlderThan: opts.OlderThan.String(), Cutoff: eventlog.FormatTime(cutoff),
		Archive: archive, Archived: []GCArchived{}, Removed: []string{}, Kept: []GCKept{}}
	runs, err := lay.runFiles("")
	if err != nil {
		return nil, err
	}
	byTask := map[string][]runFile{}
	var tasks []string
	for _, rf := range runs {
		if _, ok := byTask[rf.taskID]; !ok {
			tasks = append(tasks, rf.taskID)
		}
		byTask[rf.taskID] = append(byTask[rf.taskID], rf)
	}
	sort.Strings(tasks)
	for _, id := range tasks {
		logs := byTask[id]
		sort.Slice(logs, func(i, j int) bool { return logs[i].start < logs[j].start })
		if err := e.gcTask(lay, id, logs, cutoff, archive, opts.DryRun, res); err != nil {
			return res, fmt.Errorf("gc: task %s: %w", id, err)
		}
	}
	return res, nil
}

func (e *Engine) gcTask(lay layout, id string, logs []runFile, cutoff time.Time, archive string, dryRun bool, res *GCResult) error {
	keepAll := func(reason, detail string, pid int) {
		for _, rf := range logs {
			res.Kept = append(res.Kept, GCKept{TaskID: id, Log: rf.path, Reason: reason, Detail: detail, PID: pid})
		}
	}
	lockPath := lay.lockPath(id)
	if dryRun {
		if pid, held := eventlog.Holder(lockPath); held {
			keepAll(KeepRunning, "a runner holds the task", pid)
			return nil
		}
	} else {
		lock, err := eventlog.LockTask(lockPath)
		if le, ok := errors.AsType[*eventlog.LockedError](err); ok {
			keepAll(KeepRunning, "a runner holds the task", le.PID)
			return nil
		}
		if err != nil {
			return err
		}
		defer lock.Unlock()
	}
	sums := make([]*logSummary, len(logs))
	for i, rf := range logs {
		s, err := summarizeLog(rf.path, id)
		if err != nil {
			var ce *eventlog.CorruptError
			if !errors.As(err, &ce) {
				return err
			}
		}
		sums[i] = s
	}
	if newest := sums[len(sums)-1]; newest != nil && newest.state.Summary == nil {
		keepAll(KeepUnfinished, "its newest log has no TASK_SUMMARY: a run was cut off; resume it or start it --fresh", 0)
		return nil
	}
	latestArchived := false
	for i, rf := range logs {
		s := sums[i]
		switch {
		case s == nil:
			res.Kept = append(res.Kept, GCKept{TaskID: id, Log: rf.path, Reason: KeepCorrupt, Detail: "the log is damaged; see apollo inspect"})
			continue
		case s.state.Summary == nil:
			res.Kept = append(res.Kept, GCKept{TaskID: id, Log: rf.path, Reason: KeepUnfinished, Detail: "the log has no TASK_SUMMARY"})
			continue
		case !s.last.Before(cutoff):
			res.Kept = append(res.Kept, GCKept{TaskID: id, Log: rf.path, Reason: KeepRecent,
				Detail: "last event " + s.state.LastTimestamp + " is after the cutoff"})
			continue
		}
		dst := filepath.Join(archive, filepath.Base(rf.path)+".gz")
		a := GCArchived{TaskID: id, Log: rf.path, Archive: dst, Status: outcome(s.state), LastEvent: s.state.LastTimestamp}
		if fi, err := os.Stat(rf.path); err == nil {
			a.Bytes = fi.Size()
		}
		if !dryRun {
			n, err := archiveLog(rf.path, archive)
			if err != nil {
				return err
			}
			a.ArchivedBytes = n
		}
		res.Archived = append(res.Archived, a)
		if i == len(logs)-1 {
			latestArchived = true
		}
	}
	if !latestArchived {
		return nil
	}
	for _, p := range []string{lay.outputDir(id), lay.snapshotPath(id)} {
		if _, err := os.Lstat(p); err != nil {
			continue
		}
		if !dryRun {
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("remove %s: %w", p, err)
			}
		}
		res.Removed = append(res.Removed, p)
	}
	return nil
}

// archiveLog compresses a log and its torn-tail side files into dir, then
// removes them, and returns the size of the compressed log.
func archiveLog(path, dir string) (int64, error) {
	if err := eventlog.MkdirAll(eventlog.OS{}, dir); err != nil {
		return 0, fmt.Errorf("create archive folder: %w", err)
	}
	side, _ := filepath.Glob(path + ".torn-*")
	files := append([]string{path}, side...)
	var size int64
	for i, f := range files {
		n, err := compressInto(f, filepath.Join(dir, filepath.Base(f)+".gz"))
		if err != nil {
			return 0, err
		}
		if i == 0 {
			size = n
		}
	}
	if err := (eventlog.OS{}).SyncDir(dir); err != nil {
		return 0, fmt.Errorf("archive %s: sync folder: %w", dir, err)
	}
	// Only now that the copies are durable do the originals go.
	for _, f := range files {
		if err := os.Remove(f); err != nil {
			return 0, fmt.Errorf("archive: remove %s: %w", f, err)
		}
	}
	if err := (eventlog.OS{}).SyncDir(filepath.Dir(path)); err != nil {
		return 0, fmt.Errorf("archive: sync %s: %w", filepath.Dir(path), err)
	}
	return size, nil
}

// compressInto writes src gzipped to dst atomically: a temporary file in
// dst's folder, fsynced, then renamed. It returns dst's size.
func compressInto(src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("archive %s: %w", src, err)
	}
	fail := func(err error) (int64, error) {
		tmp.Close()
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("archive %s: %w", src, err)
	}
	zw, err := gzip.NewWriterLevel(tmp, gzip.BestCompression)
	if err != nil {
		return fail(err)
	}
	zw.Name, zw.ModTime = filepath.Base(src), fi.ModTime()
	if _, err := io.Copy(zw, in); err != nil {
		return fail(err)
	}
	if err := zw.Close(); err != nil {
		return fail(err)
	}
	if err := tmp.Sync(); err != nil {
		return fail(err)
	}
	st, err := tmp.Stat()
	if err != nil {
		return fail(err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("archive %s: %w", src, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		os.Remove(tmp.Name())
		return 0, fmt.Errorf("archive %s: %w", src, err)
	}
	return st.Size(), nil
}

// WriteGC prints what gc did for a person.
func WriteGC(w io.Writer, res *GCResult) {
	verb, removed := "archived", "removed"
	if res.DryRun {
		verb, removed = "would archive", "would remove"
	}
	for _, a := range res.Archived {
		size := ""
		if a.ArchivedBytes > 0 {
			size = fmt.Sprintf(", %s -> %s", byteSize(a.Bytes), byteSize(a.ArchivedBytes))
		}
		fmt.Fprintf(w, "%s %s (%s, last event %s%s) -> %s\n", verb, a.Log, a.Status, a.LastEvent, size, a.Archive)
	}
	for _, p := range res.Removed {
		fmt.Fprintf(w, "%s %s\n", removed, p)
	}
	for _, k := range res.Kept {
		if k.Reason == KeepRecent {
			continue
		}
		reason := k.Reason
		if k.PID > 0 {
			reason += fmt.Sprintf(" (pid %d)", k.PID)
		}
		fmt.Fprintf(w, "kept %s: %s: %s\n", k.Log, reason, k.Detail)
	}
	recent := 0
	for _, k := range res.Kept {
		if k.Reason == KeepRecent {
			recent++
		}
	}
	done := "archived"
	if res.DryRun {
		done = "would be archived (dry run, nothing changed)"
	}
	fmt.Fprintf(w, "gc: %d run(s) %s to %s, %d kept (%d newer than %s)\n", len(res.Archived), done, res.Archive,
		len(res.Kept), recent, res.OlderThan)
}

// WriteGCJSON prints what gc did for machines.
func WriteGCJSON(w io.Writer, res *GCResult) error { return writeJSON(w, res) }

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

func byteSize(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
