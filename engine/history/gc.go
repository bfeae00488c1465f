package history

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"apollo/engine/statedir"
	"apollo/engine/textfmt"
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
	// IncludeUnfinished archives a task whose newest run can still be
	// resumed (interrupted, or cut off without a TASK_SUMMARY) too.
	IncludeUnfinished bool
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

// duration is the time the log's invocations ran; an invocation without a
// summary counts to now when its runner still holds the task (held), else
// to its last record.
func (s *logSummary) duration(held bool, now time.Time) time.Duration {
	d := s.spent
	if !s.open.IsZero() {
		end := s.last
		if held {
			end = now
		}
		d += max(0, end.Sub(s.open))
	}
	return d
}

// summarizeLog replays a live or archived log.
func summarizeLog(path, taskID string) (*logSummary, error) {
	s := &logSummary{}
	state, _, err := statedir.Replay(path, taskID, s.apply)
	if err != nil {
		return nil, err
	}
	s.state = state
	return s, nil
}

// apply counts r, read from the log, in the summary (not in its state).
func (s *logSummary) apply(r *eventlog.Record) {
	t := r.Time()
	switch r.EventType {
	case eventlog.TaskStart:
		if !s.open.IsZero() && !s.last.IsZero() {
			s.spent += max(0, s.last.Sub(s.open))
		}
		s.open = t
	case eventlog.TaskSummary:
		if !s.open.IsZero() {
			s.spent += max(0, t.Sub(s.open))
		}
		s.open = time.Time{}
	}
	s.records++
	s.last = t
}

// resumable reports whether apollo run would carry on a task whose newest
// log is st: a run cut off (no TASK_SUMMARY) or interrupted.
func resumable(st *eventlog.State) bool {
	return st.Summary == nil || st.Summary.Status == eventlog.Pending ||
		(st.Summary.Summary != nil && st.Summary.Summary.Interrupted)
}

// outcome names how a finished log ended.
func outcome(st *eventlog.State) string {
	switch {
	case st.Summary == nil, st.Summary.Status == eventlog.Pending: // cut off, or --only/--until
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
// holds is never touched, nor, unless opts.IncludeUnfinished, one whose
// newest run can be resumed (cut off or interrupted). While it works on a
// task, GC holds the task's lock, so no run can start on it. An archived
// log keeps what at-most-once needs: apollo run finds a task complete from
// its archive, and a new log of the task inherits its markers.
//
// Archiving is crash-safe: the .gz is written under a temporary name,
// fsynced, renamed and its folder fsynced before the log is removed; a
// crash leaves at worst both copies, and the next gc finishes the job.
// Artifacts (<state-dir>/artifacts) and lock files are left alone.
func (h Runs) GC(opts GCOptions) (*GCResult, error) {
	archive := opts.Archive
	if archive == "" {
		archive = h.Dir.Archive()
	}
	cutoff := h.now().Add(-opts.OlderThan)
	res := &GCResult{DryRun: opts.DryRun, OlderThan: opts.OlderThan.String(), Cutoff: eventlog.FormatTime(cutoff),
		Archive: archive, Archived: []GCArchived{}, Removed: []string{}, Kept: []GCKept{}}
	runs, err := h.Dir.AllLogs("")
	if err != nil {
		return nil, err
	}
	byTask := map[string][]statedir.LogFile{}
	var tasks []string
	for _, rf := range runs {
		if !rf.Regular {
			continue
		}
		if _, ok := byTask[rf.TaskID]; !ok {
			tasks = append(tasks, rf.TaskID)
		}
		byTask[rf.TaskID] = append(byTask[rf.TaskID], rf) // oldest first, as AllLogs lists them
	}
	sort.Strings(tasks)
	for _, id := range tasks {
		if err := h.gcTask(id, byTask[id], cutoff, archive, opts, res); err != nil {
			return res, fmt.Errorf("gc: task %s: %w", id, err)
		}
	}
	return res, nil
}

// gcTask archives the old finished logs of one task, holding its lock
// (or, in a dry run, only checking that no runner holds it).
func (h Runs) gcTask(id string, logs []statedir.LogFile, cutoff time.Time, archive string, opts GCOptions, res *GCResult) error {
	dryRun := opts.DryRun
	keepAll := func(reason, detail string, pid int) {
		for _, rf := range logs {
			res.Kept = append(res.Kept, GCKept{TaskID: id, Log: rf.Path, Reason: reason, Detail: detail, PID: pid})
		}
	}
	unlock, pid, err := h.lockForGC(id, dryRun)
	if err != nil {
		return err
	}
	if pid != 0 {
		keepAll(KeepRunning, "a runner holds the task", pid)
		return nil
	}
	defer unlock()
	sums := make([]*logSummary, len(logs))
	for i, rf := range logs {
		s, err := summarizeLog(rf.Path, id)
		if err != nil && !errors.As(err, new(*eventlog.CorruptError)) {
			return err
		}
		sums[i] = s
	}
	if newest := sums[len(sums)-1]; newest != nil && resumable(newest.state) && !opts.IncludeUnfinished {
		how := "was interrupted"
		switch {
		case newest.state.Summary == nil:
			how = "was cut off (no TASK_SUMMARY)"
		case newest.state.Summary.Status == eventlog.Pending:
			how = "ran part of the task (--only or --until)"
		}
		keepAll(KeepUnfinished, "its newest run "+how+" and can be resumed: run it again, "+
			"or archive it anyway with --include-unfinished", 0)
		return nil
	}
	latestArchived := false
	for i, rf := range logs {
		if kept := keepReason(sums[i], cutoff, opts.IncludeUnfinished); kept != nil {
			kept.TaskID, kept.Log = id, rf.Path
			res.Kept = append(res.Kept, *kept)
			continue
		}
		a, err := h.archiveRun(id, rf.Path, sums[i], archive, dryRun)
		if err != nil {
			return err
		}
		res.Archived = append(res.Archived, a)
		latestArchived = latestArchived || i == len(logs)-1
	}
	if latestArchived {
		return h.removeOutputs(id, dryRun, res)
	}
	return nil
}

// lockForGC takes the task's lock (in a dry run, only checks it). A pid
// other than 0 names the runner that holds it; unlock lets it go.
func (h Runs) lockForGC(id string, dryRun bool) (unlock func(), pid int, err error) {
	lockPath := h.Dir.Lock(id)
	if dryRun {
		if pid, held := eventlog.Holder(lockPath); held {
			return nil, pid, nil
		}
		return func() {}, 0, nil
	}
	lock, err := eventlog.LockTask(lockPath)
	if le, ok := errors.AsType[*eventlog.LockedError](err); ok {
		return nil, le.PID, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return func() { lock.Unlock() }, 0, nil
}

// keepReason says why gc keeps a log (its summary s, nil when damaged), or
// nil when it is old and finished.
func keepReason(s *logSummary, cutoff time.Time, includeUnfinished bool) *GCKept {
	switch {
	case s == nil:
		return &GCKept{Reason: KeepCorrupt, Detail: "the log is damaged; see apollo inspect"}
	case s.state.Summary == nil && !includeUnfinished:
		return &GCKept{Reason: KeepUnfinished, Detail: "the log has no TASK_SUMMARY"}
	case !s.last.Before(cutoff):
		return &GCKept{Reason: KeepRecent, Detail: "last event " + s.state.LastTimestamp + " is after the cutoff"}
	}
	return nil
}

// archiveRun archives one log (unless dryRun) and says what it did.
func (h Runs) archiveRun(id, path string, s *logSummary, archive string, dryRun bool) (GCArchived, error) {
	dst := filepath.Join(archive, statedir.ArchiveName(filepath.Base(path)))
	a := GCArchived{TaskID: id, Log: path, Archive: dst, Status: outcome(s.state), LastEvent: s.state.LastTimestamp}
	if fi, err := os.Stat(path); err == nil {
		a.Bytes = fi.Size()
	}
	if !dryRun {
		n, err := archiveLog(h.fs(), path, archive)
		if err != nil {
			return a, err
		}
		a.ArchivedBytes = n
	}
	return a, nil
}

// removeOutputs removes the output files and the snapshot of a task whose
// newest log was archived.
func (h Runs) removeOutputs(id string, dryRun bool, res *GCResult) error {
	for _, p := range []string{h.Dir.Outputs(id), h.Dir.Snapshot(id)} {
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
func archiveLog(fsys eventlog.FS, path, dir string) (int64, error) {
	if err := eventlog.MkdirAll(fsys, dir); err != nil {
		return 0, fmt.Errorf("create archive folder: %w", err)
	}
	side, _ := filepath.Glob(path + ".torn-*")
	files := append([]string{path}, side...)
	var size int64
	for i, f := range files {
		n, err := compressInto(fsys, f, filepath.Join(dir, statedir.ArchiveName(filepath.Base(f))))
		if err != nil {
			return 0, err
		}
		if i == 0 {
			size = n
		}
	}
	if err := fsys.SyncDir(dir); err != nil {
		return 0, fmt.Errorf("archive %s: sync folder: %w", dir, err)
	}
	// Only now that the copies are durable do the originals go.
	for _, f := range files {
		if err := fsys.Remove(f); err != nil {
			return 0, fmt.Errorf("archive: remove %s: %w", f, err)
		}
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return 0, fmt.Errorf("archive: sync %s: %w", filepath.Dir(path), err)
	}
	return size, nil
}

// compressInto writes src gzipped to dst with eventlog.WriteFileAtomic,
// through fsys. It returns the size of what it wrote.
func compressInto(fsys eventlog.FS, src, dst string) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return 0, fmt.Errorf("archive: %w", err)
	}
	var size countWriter
	err = eventlog.WriteFileAtomic(fsys, dst, 0o600, func(w io.Writer) error {
		zw, err := gzip.NewWriterLevel(io.MultiWriter(w, &size), gzip.BestCompression)
		if err != nil {
			return err
		}
		zw.Name, zw.ModTime = filepath.Base(src), fi.ModTime()
		if _, err := io.Copy(zw, in); err != nil {
			return err
		}
		return zw.Close()
	})
	if err != nil {
		return 0, fmt.Errorf("archive %s: %w", src, err)
	}
	return int64(size), nil
}

// countWriter counts the bytes written to it.
type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
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
			size = fmt.Sprintf(", %s -> %s", textfmt.Bytes(a.Bytes), textfmt.Bytes(a.ArchivedBytes))
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
func WriteGCJSON(w io.Writer, res *GCResult) error { return textfmt.WriteJSON(w, res) }

// GCJSONDoc documents gc --json's output (GCResult), shown by --help
// and checked against it by TestJSONDocs. Fields marked ? are left out when
// empty.
const GCJSONDoc = `JSON (--json), one object:
  {"dry_run": bool, "older_than" (a Go duration), "cutoff" (RFC 3339), "archive",
   "archived": [{"task_id", "log", "archive" (the .jsonl.gz), "status", "last_event",
                 "bytes", "archived_bytes" (0 in a dry run)}],
   "removed": [output folders and snapshots],
   "kept": [{"task_id", "log", "reason": "running"|"unfinished"|"recent"|"corrupt", "detail",
             "pid"? (the runner's, when running)}]}
`
