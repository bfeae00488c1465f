package cron

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Schedule log events.
const (
	// EventTracked: serve saw the pipeline's schedule for the first time;
	// Scheduled is the time from which its fires count.
	EventTracked = "tracked"
	// EventStarted: a child apollo run was started (Ref: the queued or
	// started entry it carries on, if any). Written durably before the start.
	EventStarted = "started"
	// EventExited: the child of the started entry Ref ended.
	EventExited = "exited"
	// EventSkipped: a scheduled time was not run (Reason says why).
	EventSkipped = "skipped"
	// EventMissed: Count scheduled times from Scheduled to Until passed
	// while serve was down and the catch-up policy does not run them.
	EventMissed = "missed"
	// EventQueued: a run waits for the pipeline's running one to end.
	EventQueued = "queued"
)

// Triggers: why a run was started.
const (
	TriggerSchedule = "schedule"
	TriggerCatchup  = "catchup"
	TriggerBackfill = "backfill"
	TriggerManual   = "manual"
	TriggerResume   = "resume"  // a run started before serve stopped, carried on
	TriggerAfter    = "after"   // another pipeline's run ended (triggers:)
	TriggerFile     = "file"    // a file appeared or changed (triggers:)
	TriggerWebhook  = "webhook" // a signed POST /hooks/NAME (triggers:)
)

// Entry is one line of the schedule log.
type Entry struct {
	Seq       int64  `json:"seq"`
	Timestamp string `json:"timestamp"`
	Event     string `json:"event"`
	// Pipeline is the pipeline file, relative to the pipelines folder.
	Pipeline  string `json:"pipeline"`
	Scheduled string `json:"scheduled,omitempty"` // RFC 3339 UTC
	Until     string `json:"until,omitempty"`     // missed: the last time
	Count     int    `json:"count,omitempty"`     // missed: how many times
	TaskID    string `json:"task_id,omitempty"`
	TaskDate  string `json:"task_date,omitempty"`
	Trigger   string `json:"trigger,omitempty"`
	By        string `json:"by,omitempty"`
	Fresh     bool   `json:"fresh,omitempty"`
	PID       int    `json:"pid,omitempty"`
	ExitCode  *int   `json:"exit_code,omitempty"`
	Reason    string `json:"reason,omitempty"`
	Ref       int64  `json:"ref,omitempty"`
	Output    string `json:"output,omitempty"`    // the child's stdout and stderr, relative to the state folder
	StateDir  string `json:"state_dir,omitempty"` // the run's state folder, when not the log's
	// Vars are the --var values of a run a trigger queued or started
	// (trigger.* and a webhook's mapped vars), repeated on its resume.
	Vars map[string]string `json:"vars,omitempty"`
	// Key is what a trigger decided once: after:<seq>, file:<path>:<size>:<mtime>,
	// webhook:<name>:<delivery id> (triggers.go); on a run started through
	// the API with an Idempotency-Key, api:<id>:<request> (apikey.go).
	Key string `json:"key,omitempty"`
}

// LogName is the schedule log's path under a state folder.
func LogName(stateDir string) string { return filepath.Join(stateDir, "schedule", "schedule.jsonl") }

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encode renders e as a line: its JSON with a last field "crc", the
// CRC-32C of the line as it would read without that field (P} for a line
// P,"crc":"hhhhhhhh"}), as in the event log.
func encode(e *Entry) ([]byte, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	sum := crc32.Checksum(body, castagnoli)
	line := append(body[:len(body)-1], fmt.Sprintf(`,"crc":"%08x"}`, sum)...)
	return append(line, '\n'), nil
}

// decode checks a line's checksum (without its newline) and decodes it.
func decode(line []byte) (*Entry, error) {
	const suffix = len(`,"crc":"00000000"}`)
	if len(line) < suffix+2 || !bytes.HasPrefix(line[len(line)-suffix:], []byte(`,"crc":"`)) || line[len(line)-1] != '}' {
		return nil, errors.New("no checksum at the end of the line")
	}
	want, err := strconv.ParseUint(string(line[len(line)-10:len(line)-2]), 16, 32)
	if err != nil {
		return nil, errors.New("the checksum is not 8 hex digits")
	}
	body := append(bytes.Clone(line[:len(line)-suffix]), '}')
	if crc32.Checksum(body, castagnoli) != uint32(want) {
		return nil, errors.New("checksum mismatch")
	}
	var e Entry
	if err := json.Unmarshal(body, &e); err != nil {
		return nil, err
	}
	return &e, nil
}

// CorruptError is a schedule log damaged other than by a torn tail.
type CorruptError struct {
	Path   string
	Line   int
	Reason string
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("%s:%d: %s; the schedule log was damaged after it was written: move it aside to start "+
		"a new one (schedules then count from now)", e.Path, e.Line, e.Reason)
}

// maxLine bounds a line of the schedule log.
const maxLine = 1 << 20

// ReadLog reads the schedule log at path: its good entries, and where the
// good part ends and how many damaged bytes follow it (a torn tail: a last
// line without its newline, or bad lines at the end with no good line after
// them). Damage followed by a good line, or a gap in seq, is a
// *CorruptError. A missing log is empty.
func ReadLog(path string) (entries []*Entry, end, torn int64, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, 0, nil
	}
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	var badLine int
	var badReason string
	lineNo := 0
	for {
		line, rerr := br.ReadBytes('\n')
		if len(line) == 0 && rerr == io.EOF {
			break
		}
		if rerr != nil && rerr != io.EOF {
			return nil, 0, 0, rerr
		}
		lineNo++
		if len(line) > maxLine {
			return nil, 0, 0, &CorruptError{Path: path, Line: lineNo, Reason: "line too long"}
		}
		var e *Entry
		var derr error
		if line[len(line)-1] != '\n' {
			derr = errors.New("the last line has no newline")
		} else {
			e, derr = decode(line[:len(line)-1])
		}
		if derr != nil {
			if badLine == 0 {
				badLine, badReason = lineNo, derr.Error()
			}
			torn += int64(len(line))
			continue
		}
		if badLine != 0 {
			return nil, 0, 0, &CorruptError{Path: path, Line: badLine, Reason: badReason + ", and good lines follow it"}
		}
		if want := int64(len(entries)) + 1; e.Seq != want {
			return nil, 0, 0, &CorruptError{Path: path, Line: lineNo, Reason: fmt.Sprintf("seq %d where %d was due", e.Seq, want)}
		}
		entries = append(entries, e)
		end += int64(len(line))
	}
	return entries, end, torn, nil
}

// Log appends to a schedule log. The process that holds it holds the lock
// file beside it (flock) for its life, so two apollo serve processes never
// schedule the same state folder.
type Log struct {
	path string
	f    *os.File
	lock *os.File
	seq  int64
	now  func() time.Time
}

// LockedError says another apollo serve schedules this state folder.
type LockedError struct{ Path string }

func (e *LockedError) Error() string {
	return fmt.Sprintf("%s is held by another apollo serve: it runs this state folder's schedules", e.Path)
}

// OpenLog opens (creating) the schedule log at path under its lock,
// cuts a torn tail (keeping the bytes in <path>.torn-<offset>), and returns
// it with its entries.
func OpenLog(path string, now func() time.Time) (*Log, []*Entry, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, nil, err
	}
	lock, err := os.OpenFile(path+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, nil, &LockedError{Path: path + ".lock"}
		}
		return nil, nil, fmt.Errorf("lock %s: %w", path, err)
	}
	entries, end, torn, err := ReadLog(path)
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		lock.Close()
		return nil, nil, err
	}
	if torn > 0 {
		if err := cutTail(f, path, end); err != nil {
			f.Close()
			lock.Close()
			return nil, nil, err
		}
	}
	if end == 0 && torn == 0 {
		syncDir(filepath.Dir(path))
	}
	return &Log{path: path, f: f, lock: lock, seq: int64(len(entries)), now: now}, entries, nil
}

// cutTail saves the bytes after end to a side file (fsynced) and truncates
// the log there.
func cutTail(f *os.File, path string, end int64) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	side := fmt.Sprintf("%s.torn-%d", path, end)
	if err := os.WriteFile(side, data[end:], 0o644); err != nil {
		return fmt.Errorf("save the torn tail of %s: %w", path, err)
	}
	if sf, err := os.Open(side); err == nil {
		sf.Sync()
		sf.Close()
	}
	syncDir(filepath.Dir(path))
	if err := f.Truncate(end); err != nil {
		return fmt.Errorf("cut the torn tail of %s: %w", path, err)
	}
	return f.Sync()
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
}

// Append writes e (setting its seq and timestamp) and returns once it is on
// disk.
func (l *Log) Append(e *Entry) error {
	e.Seq = l.seq + 1
	e.Timestamp = l.now().UTC().Format(time.RFC3339Nano)
	line, err := encode(e)
	if err != nil {
		return err
	}
	if _, err := l.f.Write(line); err != nil {
		return fmt.Errorf("schedule log %s: %w", l.path, err)
	}
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("schedule log %s: fsync: %w", l.path, err)
	}
	l.seq++
	return nil
}

// Seq is the seq of the last entry written.
func (l *Log) Seq() int64 { return l.seq }

// Close closes the log and lets its lock go.
func (l *Log) Close() error {
	err := l.f.Close()
	l.lock.Close()
	return err
}
