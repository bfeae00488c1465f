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
	"unicode/utf16"
	"unicode/utf8"
)

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
		"worker", "pool", "src_seq", "cached_from", "child_log", "image", "image_id", "notify"}
	startNames = []string{"v", "task_name", "pipeline", "pipeline_digest", "steps", "vars", "pid", "host",
		"run_nonce", "invocation", "durability", "parallelism", "apollo_version", "pipeline_file",
		"trace_id", "span_id"}
	stepNames         = []string{"id", "depends_on", "optional", "definition_digest", "has_cleanup", "child", "handler"}
	summaryNames      = []string{"counts", "failed", "failed_optional", "blocked", "interrupted", "fsync"}
	fsyncNames        = []string{"count", "total_us", "max_us"}
	markerNames       = []string{"name", "state", "result"}
	interventionNames = []string{"action", "steps", "marker", "why", "by"}
	notifyNames       = []string{"id", "event", "target", "payload", "attempts"}
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
		case 28: // image
			r.Image = d.str()
		case 29: // image_id
			r.ImageID = d.str()
		case 30: // notify
			r.Notify = d.notify()
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
		case 14: // trace_id
			si.TraceID = d.str()
		case 15: // span_id
			si.SpanID = d.str()
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
		case 6: // handler
			st.Handler = d.str()
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

func (d *decoder) notify() *NotifyInfo {
	if d.null() {
		return nil
	}
	n := new(NotifyInfo)
	f := fields{names: notifyNames}
	for k := d.field(&f); k >= 0; k = d.field(&f) {
		switch k {
		case 0: // id
			n.ID = d.str()
		case 1: // event
			n.Event = d.str()
		case 2: // target
			n.Target = d.str()
		case 3: // payload
			n.Payload = d.raw()
		case 4: // attempts
			n.Attempts = d.int()
		}
	}
	return n
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
