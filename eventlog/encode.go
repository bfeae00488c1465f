package eventlog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"strconv"
)

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
// intervention, a notification) or an output that is not compact JSON.
func appendRecord(b []byte, r *Record) ([]byte, bool) {
	if r.Start != nil || r.Summary != nil || r.Marker != nil || r.Intervention != nil || r.Notify != nil {
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
	if r.Image != "" {
		b = appendField(b, `,"image":`, r.Image)
	}
	if r.ImageID != "" {
		b = appendField(b, `,"image_id":`, r.ImageID)
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
