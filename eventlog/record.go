package eventlog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math/bits"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
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

// Encode renders r as one log line, newline included, with its checksum.
func Encode(r *Record) ([]byte, error) {
	r.ErrorMessage = capText(r.ErrorMessage)
	r.Message = capText(r.Message)
	prefix, ok := appendRecord(make([]byte, 0, 512), r)
	if !ok {
		body, err := encodeJSON(r)
		if err != nil {
			return nil, err
		}
		prefix = body[:len(body)-1]
	}
	sum := crc32.Update(crc32.Checksum(prefix, castagnoli), castagnoli, []byte{'}'})
	line := append(prefix, `,"crc":"`...)
	var hex [8]byte
	for i := range hex {
		hex[i] = lowerHex[sum>>(28-4*i)&0xf]
	}
	line = append(line, hex[:]...)
	line = append(line, "\"}\n"...)
	if len(line) > MaxLineBytes {
		return nil, fmt.Errorf("encode %s record: line of %d bytes is over the %d-byte limit", r.EventType, len(line), MaxLineBytes)
	}
	return line, nil
}

const lowerHex = "0123456789abcdef"

// encodeJSON renders r as encoding/json does (HTML left unescaped): the
// format's definition, which appendRecord writes the common records like.
func encodeJSON(r *Record) ([]byte, error) {
	body, err := marshalText(r)
	if err != nil {
		return nil, fmt.Errorf("encode %s record: %w", r.EventType, err)
	}
	return body, nil // `{...}`
}

// marshalText is json.Marshal with HTML left unescaped, as a log line has it.
func marshalText(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// appendRecord appends r as encodeJSON writes it, less the closing brace,
// for the records a run writes by the thousand (STEP_START, STEP_END,
// STEP_PROCESS, CLEANUP): encoding/json's reflection was most of an
// append's CPU time. It reports false, and may have appended part of r,
// for a record with a nested object (TASK_START, TASK_SUMMARY, MARKER, an
// intervention) or an output that is not compact JSON.
func appendRecord(b []byte, r *Record) ([]byte, bool) {
	if r.Start != nil || r.Summary != nil || r.Marker != nil || r.Intervention != nil {
		return b, false
	}
	b = append(b, `{"seq":`...)
	b = strconv.AppendInt(b, r.Seq, 10)
	b = appendField(b, `,"timestamp":`, r.Timestamp)
	b = appendField(b, `,"task_id":`, r.TaskID)
	b = appendField(b, `,"step_id":`, r.StepID)
	b = appendField(b, `,"event_type":`, r.EventType)
	b = appendField(b, `,"status":`, r.Status)
	b = append(b, `,"retry_count":`...)
	b = strconv.AppendInt(b, int64(r.RetryCount), 10)
	b = appendField(b, `,"input_digest":`, r.InputDigest)
	b = appendField(b, `,"output_digest":`, r.OutputDigest)
	b = appendField(b, `,"error_message":`, r.ErrorMessage)
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, r.DurationMS, 10)
	if r.Message != "" {
		b = appendField(b, `,"message":`, r.Message)
	}
	if r.PGID != 0 {
		b = append(b, `,"pgid":`...)
		b = strconv.AppendInt(b, int64(r.PGID), 10)
	}
	if r.ExitCode != nil {
		b = append(b, `,"exit_code":`...)
		b = strconv.AppendInt(b, int64(*r.ExitCode), 10)
	}
	if r.NextDelayMS != 0 {
		b = append(b, `,"next_delay_ms":`...)
		b = strconv.AppendInt(b, r.NextDelayMS, 10)
	}
	if r.Interrupted {
		b = append(b, `,"interrupted":true`...)
	}
	if r.TimedOut {
		b = append(b, `,"timed_out":true`...)
	}
	if r.Dirty {
		b = append(b, `,"dirty":true`...)
	}
	if len(r.Output) > 0 {
		b = append(b, `,"output":`...)
		if !compactJSON(r.Output) {
			return b, false
		}
		b = append(b, r.Output...)
	}
	if r.Worker != "" {
		b = appendField(b, `,"worker":`, r.Worker)
	}
	if r.Pool != "" {
		b = appendField(b, `,"pool":`, r.Pool)
	}
	if r.SrcSeq != 0 {
		b = append(b, `,"src_seq":`...)
		b = strconv.AppendInt(b, r.SrcSeq, 10)
	}
	if r.CachedFrom != "" {
		b = appendField(b, `,"cached_from":`, r.CachedFrom)
	}
	if r.ChildLog != "" {
		b = appendField(b, `,"child_log":`, r.ChildLog)
	}
	return b, true
}

// appendField appends key and s as a JSON string. Printable ASCII other
// than " and \ is written as is; any other string is left to encoding/json,
// so that its escapes (control characters, U+2028, invalid UTF-8) need no
// copy here.
func appendField(b []byte, key, s string) []byte {
	b = append(b, key...)
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			q, _ := marshalText(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// compactJSON reports whether raw is valid JSON that encoding/json writes as
// it is (with HTML left unescaped, it only drops the white space between
// tokens).
func compactJSON(raw []byte) bool {
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case inString:
			if escaped {
				escaped = false
			} else if c == '\\' {
				escaped = true
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			return false
		}
	}
	return json.Valid(raw)
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
// It accepts and rejects what json.Unmarshal does: decodeFast parses the
// lines a writer writes, and leaves anything else to encoding/json.
func Decode(line []byte) (*Record, error) {
	return decode(line, nil)
}

// decode is Decode drawing on a reader's arena (nil: none).
func decode(line []byte, a *arena) (*Record, error) {
	prefix, err := checkedPrefix(line)
	if err != nil {
		return nil, err
	}
	if r, ok := decodeFast(prefix, a); ok {
		return r, nil
	}
	body := make([]byte, 0, len(prefix)+1)
	body = append(append(body, prefix...), '}')
	var r Record
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("not a JSON record: %w", err)
	}
	return &r, nil
}

// checkedPrefix checks a line's framing and checksum and returns the line
// without its crc suffix: the record's JSON is that prefix plus "}".
func checkedPrefix(line []byte) ([]byte, error) {
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
	prefix := line[:len(line)-crcSuffixLen]
	if got := crc32.Update(crc32.Checksum(prefix, castagnoli), castagnoli, []byte{'}'}); got != want {
		return nil, fmt.Errorf("checksum mismatch (line says %08x, content gives %08x): the line was damaged or edited", want, got)
	}
	return prefix, nil
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
		v := hexValue[c]
		if v > 0xf {
			return 0, false
		}
		sum = sum<<4 | uint32(v)
	}
	return sum, true
}

// hexValue maps lower-case hex digits to their value, other bytes to 0xff.
var hexValue = func() (t [256]byte) {
	for c := range t {
		t[c] = 0xff
	}
	for c := '0'; c <= '9'; c++ {
		t[c] = byte(c - '0')
	}
	for c := 'a'; c <= 'f'; c++ {
		t[c] = byte(c - 'a' + 10)
	}
	return t
}()

// decodeFast parses a record from a line's body, prefix followed by "}",
// the way json.Unmarshal would, in one pass. It reports false for anything
// outside the shapes it knows for certain, and then the caller asks
// encoding/json, which gives the record or the error. So a line that
// decodeFast accepts is one json.Unmarshal accepts, giving the same Record
// (FuzzDecode checks both).
//
// The fast path gives up on: white space between tokens (a writer puts
// none), a key with an escape or a non-ASCII byte, a repeated key, a key
// that matches a field only in another case (json matches keys in any
// case), a number with a fraction or exponent or out of range, a \u escape
// of a surrogate, invalid UTF-8 in a decoded string, unknown values nested
// deeper than maxSkipDepth, and a value of the wrong type.
//
// Allocation is what a replay spends most on after parsing, so the strings
// of the eleven fields that open every line share one allocation holding
// just their text (less the strings the arena a already holds), the other
// strings of a long line (a TASK_START) are slices of one copy of the line,
// and a reader's records come from its arena's blocks.
func decodeFast(prefix []byte, a *arena) (*Record, bool) {
	d := decoder{s: prefix}
	var r Record // on the stack while it is filled: no write barriers
	d.record(&r)
	if d.bad || d.i != len(d.s)+1 { // +1: the closing brace after prefix
		return nil, false
	}
	if d.headed {
		h := d.headText(a)
		r.Timestamp, r.TaskID, r.StepID, r.EventType = h[headTimestamp], h[headTaskID], h[headStepID], h[headEventType]
		r.Status, r.InputDigest, r.OutputDigest, r.ErrorMessage = h[headStatus], h[headInputDigest], h[headOutputDigest], h[headErrorMessage]
	}
	out := a.record()
	*out = r
	return out, true
}

// arena is what one reader's decoding shares from line to line.
type arena struct {
	// block holds the records to hand out: one allocation for many. A
	// record the caller keeps keeps its block alive, a few kilobytes.
	block []Record
	// prev is the head's strings of the line before: the next line often
	// repeats them (the task id; the step, input digest and status of the
	// STEP_START that a STEP_END ends).
	prev [headStrings]string
}

// recordBlock is how many records an arena allocates at once.
const recordBlock = 32

// record returns a zero Record: from a's block, or of its own if a is nil.
func (a *arena) record() *Record {
	if a == nil {
		return new(Record)
	}
	if len(a.block) == 0 {
		a.block = make([]Record, recordBlock)
	}
	r := &a.block[0]
	a.block = a.block[1:]
	return r
}

// headNames are the event types and states a head's strings name, kept
// rather than copied.
var headNames = [...]string{TaskStart, StepStart, StepProcess, StepEnd, Cleanup, Marker, Warning, TaskSummary,
	Dispatch, Lost, Pending, Running, Success, Failed, Skipped}

// wholeLineBytes is the length from which a line's strings, but for the
// head's, are slices of one copy of the line rather than copies of their
// own.
const wholeLineBytes = 4 << 10

// maxSkipDepth bounds the nesting of the unknown values decodeFast skips;
// deeper ones are left to encoding/json (whose limit is 10,000).
const maxSkipDepth = 128

// decoder is decodeFast's state. s is the body without its closing brace,
// which peek alone sees, at len(s). bad is sticky: once it is set, methods
// return zero values, and every loop ends.
type decoder struct {
	s     []byte
	whole string // s copied, for a long line, once a string needs it
	i     int
	bad   bool

	// The head's strings (see headStr): where the text of each is in s, or
	// the string made.
	spans  [headStrings]span
	made   [headStrings]string
	headed bool // the line began with the head: its strings are to be set
}

type span struct{ a, b int }

func (d *decoder) fail() { d.bad = true }

// peek returns the next byte, 0 at the end.
func (d *decoder) peek() byte {
	if d.i < len(d.s) {
		return d.s[d.i]
	}
	if d.i == len(d.s) {
		return '}'
	}
	return 0
}

// expect consumes byte c.
func (d *decoder) expect(c byte) {
	if d.peek() != c {
		d.fail()
		return
	}
	d.i++
}

// lit consumes s if it comes next.
func (d *decoder) lit(s string) bool {
	if len(d.s)-d.i >= len(s) && string(d.s[d.i:d.i+len(s)]) == s {
		d.i += len(s)
		return true
	}
	return false
}

func (d *decoder) literal(s string) {
	if !d.lit(s) {
		d.fail()
	}
}

// more consumes what follows a member of an object or an element of an
// array: a comma, reporting true that another comes, or the closing byte
// end. Anything else fails.
func (d *decoder) more(end byte) bool {
	switch d.peek() {
	case ',':
		d.i++
		return true
	case end:
		d.i++
	default:
		d.fail()
	}
	return false
}

// null consumes a null literal if one is next.
func (d *decoder) null() bool {
	if d.peek() != 'n' {
		return false
	}
	d.literal("null")
	return true
}

// text returns d.s[a:b] as a string: a slice of the copy of a long line, a
// copy of its own otherwise.
func (d *decoder) text(a, b int) string {
	if len(d.s) <= wholeLineBytes {
		return string(d.s[a:b])
	}
	if d.whole == "" {
		d.whole = string(d.s)
	}
	return d.whole[a:b]
}

// fields walks the members of an object whose fields have the JSON names
// names (see decoder.field).
type fields struct {
	names   []string
	seen    uint64 // the names met so far
	next    int    // a writer puts the fields in the order of names
	started bool
}

// field moves to the next member of the object whose key is one of
// f.names, leaving d.i at its value for the caller to read, and returns the
// name's index. It checks and skips the values of other keys. It returns -1
// at the end of the object or on a failure.
func (d *decoder) field(f *fields) int {
	for !d.bad {
		if !f.started {
			f.started = true
			d.expect('{')
			if d.peek() == '}' {
				d.i++
				return -1
			}
		} else if !d.more('}') {
			return -1
		}
		k := d.knownKey(f.names, f.next)
		if k < 0 {
			key := d.key()
			for j, n := range f.names {
				if strings.EqualFold(key, n) {
					if key != n {
						d.fail() // json.Unmarshal matches keys in any case: leave that to it
						return -1
					}
					k = j
					break
				}
			}
		}
		d.expect(':')
		if d.bad {
			return -1
		}
		if k < 0 {
			d.skip(0)
			continue
		}
		if f.seen&(1<<k) != 0 {
			d.fail() // json.Unmarshal merges repeated keys: leave that to it
			return -1
		}
		f.seen |= 1 << k
		f.next = k + 1
		return k
	}
	return -1
}

// knownKey consumes the key at d.i if it is one of names[from:] and returns
// its index; otherwise it returns -1 and consumes nothing. Names hold no
// quote or backslash, so a match is the key itself.
func (d *decoder) knownKey(names []string, from int) int {
	if d.peek() != '"' {
		return -1
	}
	rest := d.s[d.i+1:]
	for j := from; j < len(names); j++ {
		if n := names[j]; len(rest) > len(n) && rest[len(n)] == '"' && string(rest[:len(n)]) == n {
			d.i += len(n) + 2
			return j
		}
	}
	return -1
}

// key reads an object key made of plain ASCII, without escapes.
func (d *decoder) key() string {
	if d.peek() != '"' {
		d.fail()
		return ""
	}
	start := d.i + 1
	for j := start; j < len(d.s); j++ {
		switch c := d.s[j]; {
		case c == '"':
			d.i = j + 1
			return string(d.s[start:j])
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			d.fail()
			return ""
		}
	}
	d.fail()
	return ""
}

// str reads a string (null gives "", as json.Unmarshal leaves the field).
func (d *decoder) str() string {
	if a, b, ok := d.plainStr(); ok {
		return d.text(a, b)
	}
	return d.strSlow()
}

// The strings of the fields that open every line, in order: headStr and
// headText put their text in one allocation.
const (
	headTimestamp = iota
	headTaskID
	headStepID
	headEventType
	headStatus
	headInputDigest
	headOutputDigest
	headErrorMessage
	headStrings
)

// headStr reads the head's string k. The text of a plain string is noted
// for headText; any other is made at once.
func (d *decoder) headStr(k int) {
	if a, b, ok := d.plainStr(); ok {
		d.spans[k] = span{a, b}
		return
	}
	d.made[k] = d.strSlow()
}

// headText copies the text headStr noted into one string and returns the
// head's strings, by field. A string equal to an event type, a state or the
// same field of the line before (a's) is not copied: that one is used.
func (d *decoder) headText(a *arena) [headStrings]string {
	var buf [256]byte // most heads fit: no allocation but the string's
	text := buf[:0]
	strs := d.made
	var kept [headStrings]bool
	for k, sp := range d.spans {
		if sp.a >= sp.b {
			continue
		}
		b := d.s[sp.a:sp.b]
		if a != nil && string(b) == a.prev[k] {
			strs[k], kept[k] = a.prev[k], true
			continue
		}
		if k == headEventType || k == headStatus {
			for _, n := range headNames {
				if string(b) == n {
					strs[k], kept[k] = n, true
					break
				}
			}
			if kept[k] {
				continue
			}
		}
		text = append(text, b...)
	}
	all := string(text)
	for k, sp := range d.spans {
		if n := sp.b - sp.a; n > 0 && !kept[k] {
			strs[k], all = all[:n], all[n:]
		}
	}
	if a != nil {
		a.prev = strs
	}
	return strs
}

// plainStr consumes a string whose bytes all stand for themselves (no
// escape, only ASCII) and returns where its text is; otherwise it consumes
// nothing and returns false.
func (d *decoder) plainStr() (a, b int, ok bool) {
	if d.peek() != '"' {
		return 0, 0, false
	}
	s, start := d.s, d.i+1
	j := start
	// Eight bytes at a time up to the first byte that is not plain.
	for ; j+8 <= len(s); j += 8 {
		if m := notPlain(binary.LittleEndian.Uint64(s[j:])); m != 0 {
			j += bits.TrailingZeros64(m) / 8
			break
		}
	}
	for j < len(s) && plainByte[s[j]] {
		j++
	}
	if j < len(s) && s[j] == '"' {
		d.i = j + 1
		return start, j, true
	}
	return 0, 0, false
}

const (
	ones = 0x0101010101010101
	high = 0x8080808080808080
)

// notPlain sets the high bit of each byte of w that is not plainByte: a
// quote, a backslash, a control character or a byte of a multi-byte rune.
// Bytes above the lowest one set may be wrong (a carry or borrow moves
// upwards), never the lowest one nor those below it.
func notPlain(w uint64) uint64 {
	q := w ^ (ones * '"')
	b := w ^ (ones * '\\')
	// A byte below 0x20 is one whose high bit adding 0x60 leaves clear.
	return (^(w + ones*0x60) | w | (q-ones)&^q | (b-ones)&^b) & high
}

// plainByte says which bytes stand for themselves in a JSON string: not a
// quote, a backslash, a control character or part of a multi-byte rune.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// strSlow reads a string that may have escapes and non-ASCII runes, or
// null.
func (d *decoder) strSlow() string {
	if d.null() {
		return ""
	}
	if d.peek() != '"' {
		d.fail()
		return ""
	}
	start := d.i + 1
	var buf []byte // nil while nothing was unescaped
	plain := start // d.s[plain:j] is still to be copied to buf
	for j := start; j < len(d.s); {
		c := d.s[j]
		switch {
		case c == '"':
			d.i = j + 1
			if buf == nil {
				return d.text(start, j)
			}
			return string(append(buf, d.s[plain:j]...))
		case c < 0x20:
			d.fail()
			return ""
		case c == '\\':
			if j+1 >= len(d.s) {
				d.fail()
				return ""
			}
			buf = append(buf, d.s[plain:j]...)
			switch e := d.s[j+1]; e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := hex4(d.s[j+2:])
				if !ok || utf16.IsSurrogate(r) {
					d.fail() // json pairs surrogates or replaces them: leave that to it
					return ""
				}
				buf = utf8.AppendRune(buf, r)
				j += 4
			default:
				d.fail()
				return ""
			}
			j += 2
			plain = j
		case c >= utf8.RuneSelf:
			r, size := utf8.DecodeRune(d.s[j:])
			if r == utf8.RuneError && size == 1 {
				d.fail() // json replaces invalid UTF-8 with U+FFFD
				return ""
			}
			j += size
		default:
			j++
		}
	}
	d.fail()
	return ""
}

func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// integer reads an integer that fits in bits (null gives 0).
func (d *decoder) integer(bits int) int64 {
	if d.null() {
		return 0
	}
	j := d.i
	neg := j < len(d.s) && d.s[j] == '-'
	if neg {
		j++
	}
	start := j
	var n uint64
	for ; j < len(d.s); j++ {
		c := d.s[j] - '0'
		if c > 9 {
			break
		}
		n = n*10 + uint64(c)
	}
	if j == start || j-start > 18 || (j-start > 1 && d.s[start] == '0') {
		d.fail() // no digits, a leading zero, or maybe out of range: leave that to json
		return 0
	}
	if j < len(d.s) && (d.s[j] == '.' || d.s[j] == 'e' || d.s[j] == 'E') {
		d.fail() // json.Unmarshal refuses these for an int, with its own error
		return 0
	}
	limit := uint64(1)<<(bits-1) - 1
	if neg {
		limit++
	}
	if n > limit {
		d.fail()
		return 0
	}
	d.i = j
	if neg {
		return -int64(n)
	}
	return int64(n)
}

func (d *decoder) int() int { return int(d.integer(strconv.IntSize)) }

func (d *decoder) intPtr() *int {
	if d.null() {
		return nil
	}
	n := d.int()
	return &n
}

func (d *decoder) boolean() bool {
	switch d.peek() {
	case 't':
		d.literal("true")
		return true
	case 'f':
		d.literal("false")
	case 'n':
		d.literal("null")
	default:
		d.fail()
	}
	return false
}

// raw reads any value and returns a copy of its bytes, as json.RawMessage
// does (null gives "null").
func (d *decoder) raw() json.RawMessage {
	start := d.i
	d.skip(0)
	if d.bad || d.i > len(d.s) { // a value cannot end with the closing brace of the line
		d.fail()
		return nil
	}
	return append(json.RawMessage(nil), d.s[start:d.i]...)
}

// skip reads any value, checking that it is valid JSON.
func (d *decoder) skip(depth int) {
	if depth > maxSkipDepth {
		d.fail()
		return
	}
	switch d.peek() {
	case '{':
		d.i++
		if d.peek() == '}' {
			d.i++
			return
		}
		for !d.bad {
			if d.peek() != '"' {
				d.fail()
				return
			}
			d.skipString()
			d.expect(':')
			d.skip(depth + 1)
			if !d.more('}') {
				return
			}
		}
	case '[':
		d.i++
		if d.peek() == ']' {
			d.i++
			return
		}
		for !d.bad {
			d.skip(depth + 1)
			if !d.more(']') {
				return
			}
		}
	case '"':
		d.skipString()
	case 't':
		d.literal("true")
	case 'f':
		d.literal("false")
	case 'n':
		d.literal("null")
	default:
		d.number()
	}
}

// skipString reads a string as JSON's grammar has it: any byte but a quote,
// a backslash or a control character, or an escape.
func (d *decoder) skipString() {
	for j := d.i + 1; j < len(d.s); j++ {
		switch c := d.s[j]; {
		case c == '"':
			d.i = j + 1
			return
		case c < 0x20:
			d.fail()
			return
		case c == '\\':
			if j+1 >= len(d.s) {
				d.fail()
				return
			}
			switch d.s[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j++
			case 'u':
				if _, ok := hex4(d.s[j+2:]); !ok {
					d.fail()
					return
				}
				j += 5
			default:
				d.fail()
				return
			}
		}
	}
	d.fail()
}

// number reads a number as JSON's grammar has it.
func (d *decoder) number() {
	s, j := d.s, d.i
	digits := func() bool {
		from := j
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		return j > from
	}
	if j < len(s) && s[j] == '-' {
		j++
	}
	switch {
	case j < len(s) && s[j] == '0':
		j++
	case !digits():
		d.fail()
		return
	}
	if j < len(s) && s[j] == '.' {
		j++
		if !digits() {
			d.fail()
			return
		}
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		j++
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if !digits() {
			d.fail()
			return
		}
	}
	d.i = j
}

// list reads an array, each element with elem, which reads into the
// element it is given (null gives nil, [] an empty list).
func list[T any](d *decoder, elem func(*T)) []T {
	if d.null() {
		return nil
	}
	d.expect('[')
	out := []T{}
	if d.peek() == ']' {
		d.i++
		return out
	}
	for !d.bad {
		var zero T
		out = append(out, zero)
		elem(&out[len(out)-1])
		if !d.more(']') {
			break
		}
	}
	if d.bad {
		return nil
	}
	return out
}

// dict reads an object into a map, each value with elem (null gives nil).
// A repeated key keeps its last value, as json.Unmarshal does.
func dict[T any](d *decoder, elem func(*T)) map[string]T {
	if d.null() {
		return nil
	}
	d.expect('{')
	out := map[string]T{}
	if d.peek() == '}' {
		d.i++
		return out
	}
	for !d.bad {
		if d.peek() != '"' {
			d.fail()
			return nil
		}
		k := d.str()
		d.expect(':')
		var v T
		elem(&v)
		out[k] = v
		if !d.more('}') {
			break
		}
	}
	if d.bad {
		return nil
	}
	return out
}

func (d *decoder) strInto(s *string) { *s = d.str() }
func (d *decoder) intInto(n *int)    { *n = d.int() }

// The JSON names of each struct's fields, in struct order (a test checks
// them against the tags).
var (
	recordNames = []string{"seq", "timestamp", "task_id", "step_id", "event_type", "status", "retry_count",
		"input_digest", "output_digest", "error_message", "duration_ms", "message", "pgid", "exit_code",
		"next_delay_ms", "interrupted", "timed_out", "dirty", "output", "start", "summary", "marker", "intervention",
		"worker", "pool", "src_seq", "cached_from", "child_log"}
	startNames = []string{"v", "task_name", "pipeline", "pipeline_digest", "steps", "vars", "pid", "host",
		"run_nonce", "invocation", "durability", "parallelism", "apollo_version", "pipeline_file"}
	stepNames         = []string{"id", "depends_on", "optional", "definition_digest", "has_cleanup", "child"}
	summaryNames      = []string{"counts", "failed", "failed_optional", "blocked", "interrupted", "fsync"}
	fsyncNames        = []string{"count", "total_us", "max_us"}
	markerNames       = []string{"name", "state", "result"}
	interventionNames = []string{"action", "steps", "marker", "why", "by"}
)

func (d *decoder) record(r *Record) {
	f := fields{names: recordNames}
	if d.head(r) {
		d.headed = true
		f.started, f.seen, f.next = true, 1<<11-1, 11
	} else {
		*r = Record{}
		d.i, d.bad, d.spans, d.made = 0, false, [headStrings]span{}, [headStrings]string{}
	}
	for k := d.field(&f); k >= 0; k = d.field(&f) {
		switch k {
		case 0: // seq
			r.Seq = d.integer(64)
		case 1: // timestamp
			r.Timestamp = d.str()
		case 2: // task_id
			r.TaskID = d.str()
		case 3: // step_id
			r.StepID = d.str()
		case 4: // event_type
			r.EventType = d.str()
		case 5: // status
			r.Status = d.str()
		case 6: // retry_count
			r.RetryCount = d.int()
		case 7: // input_digest
			r.InputDigest = d.str()
		case 8: // output_digest
			r.OutputDigest = d.str()
		case 9: // error_message
			r.ErrorMessage = d.str()
		case 10: // duration_ms
			r.DurationMS = d.integer(64)
		case 11: // message
			r.Message = d.str()
		case 12: // pgid
			r.PGID = d.int()
		case 13: // exit_code
			r.ExitCode = d.intPtr()
		case 14: // next_delay_ms
			r.NextDelayMS = d.integer(64)
		case 15: // interrupted
			r.Interrupted = d.boolean()
		case 16: // timed_out
			r.TimedOut = d.boolean()
		case 17: // dirty
			r.Dirty = d.boolean()
		case 18: // output
			r.Output = d.raw()
		case 19: // start
			r.Start = d.startInfo()
		case 20: // summary
			r.Summary = d.summary()
		case 21: // marker
			r.Marker = d.marker()
		case 22: // intervention
			r.Intervention = d.intervention()
		case 23: // worker
			r.Worker = d.str()
		case 24: // pool
			r.Pool = d.str()
		case 25: // src_seq
			r.SrcSeq = d.integer(64)
		case 26: // cached_from
			r.CachedFrom = d.str()
		case 27: // child_log
			r.ChildLog = d.str()
		}
	}
}

// head reads the eleven fields that a writer puts first on every line, in
// its order and layout, without looking keys up. It reports false when the
// line begins otherwise, and the caller starts again from the beginning.
func (d *decoder) head(r *Record) bool {
	if !d.lit(`{"seq":`) {
		return false
	}
	r.Seq = d.integer(64)
	if !d.lit(`,"timestamp":`) {
		return false
	}
	d.headStr(headTimestamp)
	if !d.lit(`,"task_id":`) {
		return false
	}
	d.headStr(headTaskID)
	if !d.lit(`,"step_id":`) {
		return false
	}
	d.headStr(headStepID)
	if !d.lit(`,"event_type":`) {
		return false
	}
	d.headStr(headEventType)
	if !d.lit(`,"status":`) {
		return false
	}
	d.headStr(headStatus)
	if !d.lit(`,"retry_count":`) {
		return false
	}
	r.RetryCount = d.int()
	if !d.lit(`,"input_digest":`) {
		return false
	}
	d.headStr(headInputDigest)
	if !d.lit(`,"output_digest":`) {
		return false
	}
	d.headStr(headOutputDigest)
	if !d.lit(`,"error_message":`) {
		return false
	}
	d.headStr(headErrorMessage)
	if !d.lit(`,"duration_ms":`) {
		return false
	}
	r.DurationMS = d.integer(64)
	return !d.bad
}

func (d *decoder) startInfo() *StartInfo {
	if d.null() {
		return nil
	}
	si := new(StartInfo)
	f := fields{names: startNames}
	for k := d.field(&f); k >= 0; k = d.field(&f) {
		switch k {
		case 0: // v
			si.Version = d.int()
		case 1: // task_name
			si.TaskName = d.str()
		case 2: // pipeline
			si.Pipeline = d.str()
		case 3: // pipeline_digest
			si.PipelineDigest = d.str()
		case 4: // steps
			si.Steps = list(d, d.stepInfo)
		case 5: // vars
			si.Vars = dict(d, d.strInto)
		case 6: // pid
			si.PID = d.int()
		case 7: // host
			si.Host = d.str()
		case 8: // run_nonce
			si.RunNonce = d.str()
		case 9: // invocation
			si.Invocation = d.int()
		case 10: // durability
			si.Durability = d.str()
		case 11: // parallelism
			si.Parallelism = d.int()
		case 12: // apollo_version
			si.ApolloVersion = d.str()
		case 13: // pipeline_file
			si.PipelineFile = d.str()
		}
	}
	return si
}

// stepInfo reads one element of start.steps into st (null leaves it zero,
// as json.Unmarshal does for an element).
func (d *decoder) stepInfo(st *StepInfo) {
	if d.null() {
		return
	}
	f := fields{names: stepNames}
	for k := d.field(&f); k >= 0; k = d.field(&f) {
		switch k {
		case 0: // id
			st.ID = d.str()
		case 1: // depends_on
			st.DependsOn = list(d, d.strInto)
		case 2: // optional
			st.Optional = d.boolean()
		case 3: // definition_digest
			st.DefinitionDigest = d.str()
		case 4: // has_cleanup
			st.HasCleanup = d.boolean()
		case 5: // child
			st.Child = d.str()
		}
	}
}

func (d *decoder) summary() *SummaryInfo {
	if d.null() {
		return nil
	}
	s := new(SummaryInfo)
	f := fields{names: summaryNames}
	for k := d.field(&f); k >= 0; k = d.field(&f) {
		switch k {
		case 0: // counts
			s.Counts = dict(d, d.intInto)
		case 1: // failed
			s.Failed = list(d, d.strInto)
		case 2: // failed_optional
			s.FailedOptional = list(d, d.strInto)
		case 3: // blocked
			s.Blocked = list(d, d.strInto)
		case 4: // interrupted
			s.Interrupted = d.boolean()
		case 5: // fsync
			s.Fsync = d.fsync()
		}
	}
	return s
}

func (d *decoder) fsync() *FsyncInfo {
	if d.null() {
		return nil
	}
	fi := new(FsyncInfo)
	f := fields{names: fsyncNames}
	for k := d.field(&f); k >= 0; k = d.field(&f) {
		switch k {
		case 0: // count
			fi.Count = d.integer(64)
		case 1: // total_us
			fi.TotalUS = d.integer(64)
		case 2: // max_us
			fi.MaxUS = d.integer(64)
		}
	}
	return fi
}

func (d *decoder) marker() *MarkerInfo {
	if d.null() {
		return nil
	}
	m := new(MarkerInfo)
	f := fields{names: markerNames}
	for k := d.field(&f); k >= 0; k = d.field(&f) {
		switch k {
		case 0: // name
			m.Name = d.str()
		case 1: // state
			m.State = d.str()
		case 2: // result
			m.Result = d.raw()
		}
	}
	return m
}

func (d *decoder) intervention() *Intervention {
	if d.null() {
		return nil
	}
	iv := new(Intervention)
	f := fields{names: interventionNames}
	for k := d.field(&f); k >= 0; k = d.field(&f) {
		switch k {
		case 0: // action
			iv.Action = d.str()
		case 1: // steps
			iv.Steps = list(d, d.strInto)
		case 2: // marker
			iv.Marker = d.str()
		case 3: // why
			iv.Why = d.str()
		case 4: // by
			iv.By = d.str()
		}
	}
	return iv
}
