package eventlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"time"
)

// Version is the log format version written in every TASK_START. A reader
// refuses to append to a log whose version is newer.
const Version = 1

// Event types (SPEC §4). Readers ignore types they do not know.
const (
	TaskStart   = "TASK_START"
	StepStart   = "STEP_START"
	StepEnd     = "STEP_END"
	Cleanup     = "CLEANUP"
	Marker      = "MARKER"
	Warning     = "WARNING"
	TaskSummary = "TASK_SUMMARY"
)

// Step and task states (SPEC §4).
const (
	Pending = "PENDING"
	Running = "RUNNING"
	Success = "SUCCESS"
	Failed  = "FAILED"
	Skipped = "SKIPPED"
)

// Marker states for idempotency markers (SPEC §6).
const (
	MarkerPending = "pending"
	MarkerDone    = "done"
	MarkerCleared = "cleared"
)

// Intervention actions, carried by WARNING records. They change replay.
const (
	ActionResumeFrom    = "resume_from"
	ActionAcceptChanges = "accept_changes"
	ActionReset         = "reset"
	ActionSkip          = "skip"
	ActionClearMarker   = "clear_marker"
	ActionTornTail      = "torn_tail"
)

// Record is one line of the event log. The first eleven fields are present
// on every line (SPEC §4); the rest appear only where they mean something.
// CRC is not a field of the struct: it is added when a line is encoded and
// checked when it is decoded.
type Record struct {
	Seq          int64  `json:"seq"`
	Timestamp    string `json:"timestamp"`
	TaskID       string `json:"task_id"`
	StepID       string `json:"step_id"`
	EventType    string `json:"event_type"`
	Status       string `json:"status"`
	RetryCount   int    `json:"retry_count"`
	InputDigest  string `json:"input_digest"`
	OutputDigest string `json:"output_digest"`
	ErrorMessage string `json:"error_message"`
	DurationMS   int64  `json:"duration_ms"`

	// Message is a human sentence for WARNING and CLEANUP records.
	Message string `json:"message,omitempty"`
	// PGID names the process group of a shell attempt (STEP_START).
	PGID int `json:"pgid,omitempty"`
	// ExitCode is a shell attempt's exit status (STEP_END, CLEANUP).
	ExitCode *int `json:"exit_code,omitempty"`
	// NextDelayMS is the wait before the next attempt (STEP_END of a
	// failed attempt that will be retried).
	NextDelayMS int64 `json:"next_delay_ms,omitempty"`
	// Interrupted marks an attempt ended by SIGINT/SIGTERM or by a crash.
	Interrupted bool `json:"interrupted,omitempty"`
	// TimedOut marks an attempt ended by its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// Dirty marks a CLEANUP that recovers an attempt cut off by a crash.
	Dirty bool `json:"dirty,omitempty"`
	// Output is a succeeded step's published value (Lua return value or the
	// key=value lines a shell step wrote to $APOLLO_OUTPUT).
	Output json.RawMessage `json:"output,omitempty"`
	// Start describes the invocation (TASK_START only).
	Start *StartInfo `json:"start,omitempty"`
	// Summary closes an invocation (TASK_SUMMARY only).
	Summary *SummaryInfo `json:"summary,omitempty"`
	// Marker is an idempotency marker's change (MARKER only).
	Marker *MarkerInfo `json:"marker,omitempty"`
	// Intervention is a manual or automatic change of replayed state
	// (WARNING only).
	Intervention *Intervention `json:"intervention,omitempty"`
}

// StartInfo makes the log self-describing: with it, inspect needs nothing
// but the log.
type StartInfo struct {
	Version        int               `json:"v"`
	TaskName       string            `json:"task_name"`
	Pipeline       string            `json:"pipeline"`
	PipelineDigest string            `json:"pipeline_digest"`
	Steps          []StepInfo        `json:"steps"`
	Vars           map[string]string `json:"vars"`
	PID            int               `json:"pid"`
	Host           string            `json:"host"`
	RunNonce       string            `json:"run_nonce"`
	Invocation     int               `json:"invocation"`
	Durability     string            `json:"durability"`
	Parallelism    int               `json:"parallelism"`
	ApolloVersion  string            `json:"apollo_version"`
}

// StepInfo is one node of the step graph in TASK_START.
type StepInfo struct {
	ID               string   `json:"id"`
	DependsOn        []string `json:"depends_on"`
	Optional         bool     `json:"optional,omitempty"`
	DefinitionDigest string   `json:"definition_digest"`
	HasCleanup       bool     `json:"has_cleanup,omitempty"`
}

// SummaryInfo is the body of a TASK_SUMMARY.
type SummaryInfo struct {
	Counts         map[string]int `json:"counts"`
	Failed         []string       `json:"failed,omitempty"`
	FailedOptional []string       `json:"failed_optional,omitempty"`
	Blocked        []string       `json:"blocked,omitempty"`
	Interrupted    bool           `json:"interrupted,omitempty"`
}

// MarkerInfo is the body of a MARKER record.
type MarkerInfo struct {
	Name   string          `json:"name"`
	State  string          `json:"state"`
	Result json.RawMessage `json:"result,omitempty"`
}

// Intervention is the body of a WARNING that changes replayed state.
type Intervention struct {
	Action string   `json:"action"`
	Steps  []string `json:"steps,omitempty"`
	Marker string   `json:"marker,omitempty"`
	Why    string   `json:"why,omitempty"`
	By     string   `json:"by,omitempty"`
}

// Time parses the record's timestamp; the zero time if it does not parse.
func (r *Record) Time() time.Time {
	t, _ := time.Parse(time.RFC3339Nano, r.Timestamp)
	return t
}

// FormatTime renders t as a record timestamp: RFC 3339, nanoseconds, UTC.
func FormatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339Nano)
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcSuffixLen is the length of `,"crc":"hhhhhhhh"}`.
const crcSuffixLen = len(`,"crc":"00000000"}`)

// MaxLineBytes is the longest line a reader accepts.
const MaxLineBytes = 1 << 20

// maxErrorBytes caps error_message and message so a line stays small.
const maxErrorBytes = 4 << 10

// Encode renders r as one log line, newline included, with its checksum.
func Encode(r *Record) ([]byte, error) {
	r.ErrorMessage = capText(r.ErrorMessage)
	r.Message = capText(r.Message)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("encode %s record: %w", r.EventType, err)
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n")) // `{...}`
	sum := crc32.Checksum(body, castagnoli)
	line := make([]byte, 0, len(body)+crcSuffixLen+1)
	line = append(line, body[:len(body)-1]...)
	line = fmt.Appendf(line, `,"crc":"%08x"}`, sum)
	line = append(line, '\n')
	if len(line) > MaxLineBytes {
		return nil, fmt.Errorf("encode %s record: line of %d bytes is over the %d-byte limit", r.EventType, len(line), MaxLineBytes)
	}
	return line, nil
}

func capText(s string) string {
	if len(s) <= maxErrorBytes {
		return s
	}
	cut := len(s) - maxErrorBytes
	// Keep the end: the last lines of an error say most.
	tail := s[cut:]
	for i := 0; i < 4 && i < len(tail); i++ { // do not start mid-rune
		if tail[i]&0xC0 != 0x80 {
			tail = tail[i:]
			break
		}
	}
	return fmt.Sprintf("[truncated %d bytes]…%s", len(s)-len(tail), tail)
}

// Decode checks a line's checksum and parses it. line excludes the newline.
func Decode(line []byte) (*Record, error) {
	if len(line) < crcSuffixLen+2 {
		return nil, fmt.Errorf("line too short to be a record")
	}
	if line[len(line)-1] == '\r' {
		return nil, fmt.Errorf("line ends in CR LF: the file was converted to Windows line ends")
	}
	if bytes.HasPrefix(line, []byte("\ufeff")) {
		return nil, fmt.Errorf("line starts with a byte order mark: the file was rewritten by an editor")
	}
	suffix := line[len(line)-crcSuffixLen:]
	if !bytes.HasPrefix(suffix, []byte(`,"crc":"`)) || suffix[crcSuffixLen-2] != '"' || suffix[crcSuffixLen-1] != '}' {
		return nil, fmt.Errorf("no crc field at the end of the line")
	}
	want, ok := parseCRC(suffix)
	if !ok {
		return nil, fmt.Errorf("crc is not 8 lower-case hex digits")
	}
	body := make([]byte, 0, len(line)-crcSuffixLen+1)
	body = append(body, line[:len(line)-crcSuffixLen]...)
	body = append(body, '}')
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("checksum mismatch (line says %08x, content gives %08x): the line was damaged or edited", want, got)
	}
	var r Record
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("not a JSON record: %w", err)
	}
	return &r, nil
}

// parseCRC reads the checksum of a `,"crc":"hhhhhhhh"}` suffix. Upper-case
// hex is refused: it would let one bit flip pass.
func parseCRC(suffix []byte) (uint32, bool) {
	if len(suffix) != crcSuffixLen || !bytes.HasPrefix(suffix, []byte(`,"crc":"`)) ||
		suffix[crcSuffixLen-2] != '"' || suffix[crcSuffixLen-1] != '}' {
		return 0, false
	}
	var sum uint32
	for _, c := range suffix[8 : 8+8] {
		var v byte
		switch {
		case c >= '0' && c <= '9':
			v = c - '0'
		case c >= 'a' && c <= 'f':
			v = c - 'a' + 10
		default:
			return 0, false
		}
		sum = sum<<4 | uint32(v)
	}
	return sum, true
}
