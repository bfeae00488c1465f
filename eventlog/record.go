package eventlog

import (
	"encoding/json"
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
	StepProcess = "STEP_PROCESS" // names the process group of a running attempt
	StepEnd     = "STEP_END"
	Cleanup     = "CLEANUP"
	Marker      = "MARKER"
	Warning     = "WARNING"
	TaskSummary = "TASK_SUMMARY"
	// Dispatch says attempt n was handed to the hub (docs/spec.md §8).
	Dispatch = "DISPATCH"
	// Lost says a dispatched attempt's worker went silent past the
	// liveness deadline: the attempt is dirty (docs/spec.md §8).
	Lost = "LOST"
	// NotifySending is written, durable, before a notification is handed
	// to its target; NotifySent and NotifyFailed after (docs/spec.md §2.13).
	// A NotifySending without either is sent again by the next run.
	NotifySending = "NOTIFY_SENDING"
	NotifySent    = "NOTIFY_SENT"
	NotifyFailed  = "NOTIFY_FAILED"
	// SLAMissed says the task was not complete when its pipeline's sla:
	// ran out; written once per task run (docs/spec.md §2.13).
	SLAMissed = "SLA_MISSED"
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
	ActionOnly          = "only" // run only the steps named (apollo run --only, --until)
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
	// PGID names the process group of a shell attempt (STEP_PROCESS; a
	// STEP_START of an older apollo may carry it too).
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

	// Scale-out (docs/spec.md §8). Worker names the host and pid that ran
	// a remote attempt (STEP_START, LOST); Pool the pool an attempt was
	// dispatched to (DISPATCH); SrcSeq the hub's event-stream sequence a
	// record was ingested from, strictly increasing within a log.
	Worker string `json:"worker,omitempty"`
	Pool   string `json:"pool,omitempty"`
	SrcSeq int64  `json:"src_seq,omitempty"`

	// CachedFrom names the task run whose result a STEP_END SUCCESS took
	// from the cache instead of running the step (docs/spec.md §5.15).
	CachedFrom string `json:"cached_from,omitempty"`
	// ChildLog is the file name, in the logs folder, of the log in which a
	// run: step's attempt runs its sub-pipeline's task (STEP_START,
	// docs/spec.md §2.11): written before the child starts, so that a
	// crash leaves no doubt which of the child's logs is the attempt's.
	ChildLog string `json:"child_log,omitempty"`
	// Image and ImageID are the image a container step's attempt runs, as
	// the step names it and as the engine resolved it (STEP_START).
	Image   string `json:"image,omitempty"`
	ImageID string `json:"image_id,omitempty"`

	// Notify is a notification's id, event and target (NOTIFY_SENDING,
	// NOTIFY_SENT, NOTIFY_FAILED); its payload only on NOTIFY_SENDING.
	Notify *NotifyInfo `json:"notify,omitempty"`
}

// NotifyInfo is the body of a NOTIFY_* record. The payload is the message
// as sent (secrets masked), so that a resend is the same message; the
// target is named by its place in the pipeline file, never by its URL or
// address, which may hold a token.
type NotifyInfo struct {
	ID       string          `json:"id"`
	Event    string          `json:"event"`
	Target   string          `json:"target"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Attempts int             `json:"attempts,omitempty"`
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
	// PipelineFile is the pipeline file's absolute path: with TaskName,
	// what binds the log to its pipeline. Logs of older versions have none.
	PipelineFile string `json:"pipeline_file,omitempty"`
	// TraceID and SpanID name the invocation's span when it was traced
	// (docs/spec.md §5.16): the task's trace, which a resumed invocation
	// joins and links to. Left out when tracing was off.
	TraceID string `json:"trace_id,omitempty"`
	SpanID  string `json:"span_id,omitempty"`
}

// StepInfo is one node of the step graph in TASK_START.
type StepInfo struct {
	ID               string   `json:"id"`
	DependsOn        []string `json:"depends_on"`
	Optional         bool     `json:"optional,omitempty"`
	DefinitionDigest string   `json:"definition_digest"`
	HasCleanup       bool     `json:"has_cleanup,omitempty"`
	// Child is the task id of the sub-pipeline a run: step runs, "" for
	// other steps.
	Child string `json:"child,omitempty"`
	// Handler is the handler list the step belongs to ("on_failure",
	// "finally"), "" for a step of steps:.
	Handler string `json:"handler,omitempty"`
}

// SummaryInfo is the body of a TASK_SUMMARY.
type SummaryInfo struct {
	Counts         map[string]int `json:"counts"`
	Failed         []string       `json:"failed,omitempty"`
	FailedOptional []string       `json:"failed_optional,omitempty"`
	Blocked        []string       `json:"blocked,omitempty"`
	Interrupted    bool           `json:"interrupted,omitempty"`
	// Fsync is what the invocation's fsyncs of the log cost, up to the
	// summary itself.
	Fsync *FsyncInfo `json:"fsync,omitempty"`
}

// FsyncInfo counts the fsyncs of a log by one invocation and their time,
// in microseconds (TASK_SUMMARY's summary.fsync).
type FsyncInfo struct {
	Count   int64 `json:"count"`
	TotalUS int64 `json:"total_us"`
	MaxUS   int64 `json:"max_us"`
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

// castagnoli is the table of CRC-32C, the checksum that ends every line.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crcSuffixLen is the length of `,"crc":"hhhhhhhh"}`.
const crcSuffixLen = len(`,"crc":"00000000"}`)

// MaxLineBytes is the longest line, newline included, that a writer writes
// and a reader accepts. The longest record is a TASK_START, which names
// every step of the pipeline (about 100 bytes a step), so the limit is set
// for pipelines of several hundred thousand steps; it bounds what a reader
// holds in memory for one line.
const MaxLineBytes = 64 << 20

// maxErrorBytes caps error_message and message so a line stays small.
const maxErrorBytes = 4 << 10
