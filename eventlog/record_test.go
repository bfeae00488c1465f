package eventlog

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, want := range logRecords(testTask, sampleRecords()) {
		t.Run(fmt.Sprintf("%d-%s", want.Seq, want.EventType), func(t *testing.T) {
			line, err := Encode(want)
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if n := bytes.Count(line, []byte("\n")); n != 1 || line[len(line)-1] != '\n' {
				t.Fatalf("Encode gave %d newlines, want exactly one at the end: %q", n, line)
			}
			got, err := Decode(line[:len(line)-1])
			if err != nil {
				t.Fatalf("Decode(Encode(r)): %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Decode(Encode(r)) = %+v, want %+v", got, want)
			}
		})
	}
}

var crcSuffix = regexp.MustCompile(`,"crc":"([0-9a-f]{8})"}\n$`)

// TestEncodeLayout checks the line against SPEC §4: the eleven fixed fields
// first and in order, crc last, crc = CRC-32C of the line without it.
func TestEncodeLayout(t *testing.T) {
	fixed := []string{"seq", "timestamp", "task_id", "step_id", "event_type", "status", "retry_count",
		"input_digest", "output_digest", "error_message", "duration_ms"}
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	for _, r := range logRecords(testTask, sampleRecords()) {
		line, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		m := crcSuffix.FindSubmatch(line)
		if m == nil {
			t.Fatalf("%s line does not end in a lower-case crc field: %q", r.EventType, line)
		}
		p := line[:len(line)-len(m[0])]
		if got, want := string(m[1]), fmt.Sprintf("%08x", crc32.Checksum(append(p[:len(p):len(p)], '}'), castagnoli)); got != want {
			t.Errorf("%s: crc = %s, want CRC-32C of P} = %s", r.EventType, got, want)
		}
		keys := topLevelKeys(t, line)
		if got := keys[:len(fixed)]; !reflect.DeepEqual(got, fixed) {
			t.Errorf("%s: first keys = %v, want %v", r.EventType, got, fixed)
		}
		if got := keys[len(keys)-1]; got != "crc" {
			t.Errorf("%s: last key = %q, want crc", r.EventType, got)
		}
	}
}

func topLevelKeys(t *testing.T, line []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestEncodeText(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"newline and line separator", "bad\nline\u2028sep\r", "bad\nline\u2028sep\r"},
		{"html stays readable", "<tag> & </tag>", "<tag> & </tag>"},
		{"invalid utf-8 becomes U+FFFD", "bad \xff byte", "bad \ufffd byte"},
		{"nul", "a\x00b", "a\x00b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line, err := Encode(&Record{Seq: 1, EventType: StepEnd, ErrorMessage: tt.in})
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(line, []byte("\n")); n != 1 {
				t.Fatalf("line has %d raw newlines, want 1: %q", n, line)
			}
			if strings.Contains(tt.in, "<") && !bytes.Contains(line, []byte("<tag>")) {
				t.Errorf("line escapes <: %q", line)
			}
			r, err := Decode(line[:len(line)-1])
			if err != nil {
				t.Fatal(err)
			}
			if got := r.ErrorMessage; got != tt.want {
				t.Errorf("ErrorMessage after a round trip = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDecodeDetectsEveryBitFlip flips each bit of each byte of every sample
// line (but the newline, which is not part of what Decode sees).
func TestDecodeDetectsEveryBitFlip(t *testing.T) {
	flips := 0
	for _, line := range encodeLines(t, logRecords(testTask, sampleRecords())) {
		body := line[:len(line)-1]
		for i := range body {
			for bit := range 8 {
				damaged := bytes.Clone(body)
				damaged[i] ^= 1 << bit
				flips++
				if r, err := Decode(damaged); err == nil {
					t.Errorf("Decode(line with bit %d of byte %d flipped: %q → %q) = %+v, want an error",
						bit, i, body[i], damaged[i], r)
				}
			}
		}
	}
	t.Logf("%d single-bit flips, all detected", flips)
}

func TestDecodeRefusesCRCForms(t *testing.T) {
	// A record whose crc has a letter, so that upper case changes it.
	var line []byte
	var crc string
	for i := 0; !strings.ContainsAny(crc, "abcdef"); i++ {
		var err error
		if line, err = Encode(&Record{Seq: 1, EventType: StepStart, StepID: fmt.Sprint("a", i)}); err != nil {
			t.Fatal(err)
		}
		crc = crcSuffix.FindStringSubmatch(string(line))[1]
	}
	good := string(line[:len(line)-1])
	p := good[:len(good)-len(`,"crc":"00000000"}`)]
	tests := []struct {
		name string
		line string
	}{
		{"upper-case hex", p + `,"crc":"` + strings.ToUpper(crc) + `"}`},
		{"7 digits", p + `,"crc":"` + crc[1:] + `"}`},
		{"9 digits", p + `,"crc":"0` + crc + `"}`},
		{"crc not last", p + `,"crc":"` + crc + `","x":1}`},
		{"no crc", p + `}`},
		{"space before brace", p + `,"crc":"` + crc + `" }`},
		{"crc as number", p + `,"crc":` + crc + `}`},
		{"empty", ``},
		{"only the suffix", `,"crc":"` + crc + `"}`},
		{"not an object", `[1,"crc":"` + crc + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if r, err := Decode([]byte(tt.line)); err == nil {
				t.Errorf("Decode(%q) = %+v, want an error", tt.line, r)
			}
		})
	}
	if _, err := Decode([]byte(good)); err != nil {
		t.Errorf("Decode(good line) = %v", err)
	}
}

func TestDecodeRejectsNonRecordJSON(t *testing.T) {
	tests := []string{
		`{"seq":"one"}`,
		`{"seq":1.5}`,
		`{"start":[]}`,
		`{"seq":1,}`,
	}
	for _, body := range tests {
		line := withCRC(body)
		if r, err := Decode(line[:len(line)-1]); err == nil {
			t.Errorf("Decode(%q) = %+v, want an error", line, r)
		}
	}
}

func TestCapText(t *testing.T) {
	tests := []struct {
		name string
		in   string
	}{
		{"empty", ""},
		{"short", "exit status 1"},
		{"exactly the cap", strings.Repeat("x", maxErrorBytes)},
		{"one over", strings.Repeat("x", maxErrorBytes) + "!"},
		{"ascii, long", strings.Repeat("0123456789", 2000) + "the end"},
		{"2-byte runes", strings.Repeat("é", 5000) + "fin"},
		{"3-byte runes cut mid-rune", strings.Repeat("€", 3000) + "end"},
		{"4-byte runes", "start" + strings.Repeat("🦀", 2000)},
		{"mixed", strings.Repeat("a€🦀é\n", 1000)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := capText(tt.in)
			if len(tt.in) <= maxErrorBytes {
				if got != tt.in {
					t.Errorf("capText(%d bytes) changed a short text to %q", len(tt.in), got)
				}
				return
			}
			if !utf8.ValidString(got) {
				t.Errorf("capText(%d bytes) is not valid UTF-8", len(tt.in))
			}
			prefix, kept, ok := strings.Cut(got, "]…")
			if !ok || !strings.HasPrefix(prefix, "[truncated ") {
				t.Fatalf("capText(%d bytes) = %.40q…, want a [truncated N bytes]… prefix", len(tt.in), got)
			}
			if !strings.HasSuffix(tt.in, kept) {
				t.Errorf("capText(%d bytes) does not keep the end of the text", len(tt.in))
			}
			if min := maxErrorBytes - utf8.UTFMax + 1; len(kept) < min || len(kept) > maxErrorBytes {
				t.Errorf("capText kept %d bytes, want %d..%d", len(kept), min, maxErrorBytes)
			}
			if got, want := prefix, fmt.Sprintf("[truncated %d bytes", len(tt.in)-len(kept)); got != want {
				t.Errorf("capText prefix = %q, want %q", got, want)
			}
		})
	}
}

func TestEncodeCapsText(t *testing.T) {
	long := strings.Repeat("€", 10000) + "the real error"
	r := &Record{Seq: 1, EventType: StepEnd, ErrorMessage: long, Message: long}
	line, err := Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(line[:len(line)-1])
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{"error_message": got.ErrorMessage, "message": got.Message} {
		if !strings.HasSuffix(s, "the real error") || !utf8.ValidString(s) || len(s) > maxErrorBytes+64 {
			t.Errorf("%s after Encode: %d bytes, valid UTF-8 %v, ends %q", name, len(s), utf8.ValidString(s), s[len(s)-20:])
		}
	}
}

// TestEncodeLineLimit checks that a line of exactly MaxLineBytes is written
// and read back, and one byte more is refused.
func TestEncodeLineLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: encodes two 64 MiB lines and reads one back, seconds; run without -short")
	}
	rec := func(n int) *Record {
		return &Record{Seq: 1, TaskID: testTask, EventType: TaskStart, Start: startInfo(Version),
			Output: json.RawMessage(`"` + strings.Repeat("a", n) + `"`)}
	}
	base, err := Encode(rec(0))
	if err != nil {
		t.Fatal(err)
	}
	fit := MaxLineBytes - len(base)
	line, err := Encode(rec(fit))
	if err != nil {
		t.Fatalf("Encode(line of %d bytes) = %v, want it accepted", MaxLineBytes, err)
	}
	if len(line) != MaxLineBytes {
		t.Fatalf("line is %d bytes, want %d", len(line), MaxLineBytes)
	}
	recs, tail, err := ReadAll(writeLog(t, line), ReadOptions{TaskID: testTask})
	if err != nil || len(recs) != 1 || tail.Torn != 0 {
		t.Errorf("Read(one %d-byte line) = %d records, torn %d, %v; want 1, 0, nil", len(line), len(recs), tail.Torn, err)
	}
	if line, err := Encode(rec(fit + 1)); err == nil {
		t.Errorf("Encode(line of %d bytes) succeeded, want it refused", len(line))
	}
}

// decodeJSON is Decode as it was before decodeFast: every check, then
// json.Unmarshal. Decode must accept and reject what it does, and give the
// same records.
func decodeJSON(line []byte) (*Record, error) {
	prefix, err := checkedPrefix(line)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(append(bytes.Clone(prefix), '}'), &r); err != nil {
		return nil, fmt.Errorf("not a JSON record: %w", err)
	}
	return &r, nil
}

// fullRecord has every field of Record set, each to a value no other field
// has, with text that needs escapes.
func fullRecord() *Record {
	return &Record{Seq: 9, Timestamp: ts(3), TaskID: testTask, StepID: "s\"q", EventType: StepEnd, Status: Running,
		RetryCount: 2, InputDigest: digest("in"), OutputDigest: digest("out"), ErrorMessage: "line\nbreak\t\u2028é🦀\x00<&>",
		DurationMS: 1 << 40, Message: `back\slash /`, PGID: 4242, ExitCode: intp(-3), NextDelayMS: 7,
		Interrupted: true, TimedOut: true, Dirty: true, Output: json.RawMessage(`{"a":[1,-2.5e3,"x\"y",null,true,{}]}`),
		Start: startInfo(Version), Summary: &SummaryInfo{Counts: map[string]int{Success: 3, "": 0}, Failed: []string{"a"},
			FailedOptional: []string{}, Blocked: []string{"b", "c"}, Interrupted: true,
			Fsync: &FsyncInfo{Count: 3, TotalUS: 12345678901, MaxUS: 9}},
		Marker:       &MarkerInfo{Name: "m", State: MarkerPending, Result: json.RawMessage(`"é"`)},
		Intervention: &Intervention{Action: ActionSkip, Steps: []string{"x"}, Marker: "m", Why: "why", By: "by"}}
}

// TestDecodeFastMatchesJSON decodes lines of every kind with Decode and with
// decodeJSON (the checksum check and json.Unmarshal) and wants the same
// result. fast says whether decodeFast itself must take the line: every line
// a writer writes, so that the comparison is not of json with itself.
func TestDecodeFastMatchesJSON(t *testing.T) {
	type line struct {
		name string
		line []byte
		fast bool
	}
	var lines []line
	for _, r := range logRecords(testTask, append(sampleRecords(), fullRecord(), benchRecord(3),
		&Record{EventType: TaskStart, Start: &StartInfo{}}, &Record{EventType: Marker, Marker: &MarkerInfo{}},
		&Record{EventType: Warning, Intervention: &Intervention{}}, &Record{EventType: TaskSummary, Summary: &SummaryInfo{}},
		&Record{EventType: StepEnd, Output: json.RawMessage(`"a string"`)},
		&Record{EventType: StepEnd, StepID: strings.Repeat("long-", 2000), ErrorMessage: "é\n"}, // over wholeLineBytes
		&Record{EventType: Warning, Message: strings.Repeat("m", 5000), Intervention: &Intervention{Action: ActionSkip,
			Steps: []string{"a", "b"}, Why: "é", By: "x\ty"}},
	)) {
		enc, err := Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, line{fmt.Sprintf("%d-%s", r.Seq, r.EventType), enc, true})
	}
	const head = `"seq":1,"timestamp":"t","task_id":"t1","step_id":"s","event_type":"E","status":"S","retry_count":0,` +
		`"input_digest":"","output_digest":"","error_message":"","duration_ms":0`
	hand := []struct {
		body string
		fast bool
	}{
		{`{}`, true},
		{`{` + head + `}`, true},
		{`{` + head + `,"future":{"a":[1,{"b":null}],"c":"\u00e9\n"},"z":-0.5E+7}`, true}, // unknown fields
		{`{"status":"RUNNING","seq":3}`, true},                                            // another order
		{`{` + head + `,"output":null,"start":null,"exit_code":null,"message":null}`, true},
		{`{"start":{"steps":[null,{"id":"a","depends_on":null}],"vars":{"k":"v","k":"w","\u00e9":""}}}`, true},
		{`{"summary":{"counts":{"a":1,"b":-2}}}`, true},
		{`{"error_message":"\u2028\ud83e\udd80"}`, false},                            // a surrogate pair
		{`{"error_message":"\udc00"}`, false},                                        // a lone surrogate
		{"{\"error_message\":\"bad \xff byte\"}", false},                             // invalid UTF-8
		{"{\"x\":\"bad \xff byte\"}", true},                                          // skipped: json does not look
		{`{"SEQ":4}`, false},                                                         // json matches keys in any case
		{`{"Seq":4,"seq":5}`, false},                                                 // and the last one wins
		{`{"seq":4,"seq":5}`, false},                                                 // repeated
		{`{"start":{"v":1},"start":{"host":"h"}}`, false},                            // json merges these
		{`{"s\u0065q":4}`, false},                                                    // an escaped key
		{"{\"\u212aey\":1}", false},                                                  // a non-ASCII key (Kelvin sign folds to k)
		{`{ "seq" : 1 }`, false},                                                     // white space
		{`{"seq":1.0}`, false},                                                       // json refuses: not an int
		{`{"seq":1e2}`, false},                                                       //
		{`{"seq":9223372036854775808}`, false},                                       // out of range
		{`{"seq":-999999999999999999}`, true},                                        // 18 digits
		{`{"seq":-9223372036854775808}`, false},                                      // in range, but left to json
		{`{"seq":01}`, false},                                                        // not JSON
		{`{"seq":"1"}`, false},                                                       // wrong type
		{`{"start":[]}`, false},                                                      //
		{`{"interrupted":1}`, false},                                                 //
		{`{"output":{"a":1}`, false},                                                 // not closed
		{`{"seq":1,}`, false},                                                        //
		{`{"x":"\q"}`, false},                                                        // a bad escape
		{"{\"x\":\"tab\there\"}", false},                                             // a raw control character
		{`{"x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}`, false}, // deeper than maxSkipDepth
		{`{"x":` + strings.Repeat("[", 20) + strings.Repeat("]", 20) + `}`, true},
		{`{"seq":1}x}`, false},
	}
	for i, h := range hand {
		lines = append(lines, line{fmt.Sprintf("hand-%02d", i), withCRC(h.body), h.fast})
	}
	for _, l := range lines {
		t.Run(l.name, func(t *testing.T) {
			in := l.line[:len(l.line)-1]
			sameAsJSON(t, in)
			if _, ok := decodeFast(in[:len(in)-crcSuffixLen], nil); ok != l.fast {
				t.Errorf("decodeFast(%q) took the line: %v, want %v", in, ok, l.fast)
			}
		})
	}
}

// TestDecodeArena: lines decoded through one reader's arena, which keeps
// the strings a line repeats from the line before and hands out records
// from blocks, give the records Decode gives, and records stay apart.
func TestDecodeArena(t *testing.T) {
	var lines [][]byte
	for range 3 { // a record repeated: every string of its head is kept
		lines = append(lines, encodeLines(t, logRecords(testTask, sampleRecords()))...)
	}
	var a arena
	var got []*Record
	for i, l := range lines {
		r, err := decode(l[:len(l)-1], &a)
		if err != nil {
			t.Fatalf("line %d: decode: %v", i+1, err)
		}
		got = append(got, r)
	}
	for i, l := range lines {
		want, err := Decode(l[:len(l)-1])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got[i], want) {
			t.Errorf("line %d: decode with an arena =\n%+v\nDecode gives\n%+v", i+1, got[i], want)
		}
	}
}

// TestDecodeFastKnowsEveryField checks the names decodeFast matches keys
// against (to leave keys in another case to json) are the structs' tags.
func TestDecodeFastKnowsEveryField(t *testing.T) {
	for _, c := range []struct {
		v     any
		names []string
	}{
		{Record{}, recordNames}, {StartInfo{}, startNames}, {StepInfo{}, stepNames},
		{SummaryInfo{}, summaryNames}, {FsyncInfo{}, fsyncNames}, {MarkerInfo{}, markerNames}, {Intervention{}, interventionNames}, {NotifyInfo{}, notifyNames},
	} {
		typ := reflect.TypeOf(c.v)
		var tags []string
		for i := range typ.NumField() {
			tag, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			tags = append(tags, tag)
		}
		if !reflect.DeepEqual(c.names, tags) {
			t.Errorf("decodeFast's names for %s = %v, want the tags %v", typ.Name(), c.names, tags)
		}
	}
}

// TestNotPlain checks the eight-bytes-at-a-time test of decodeFast's string
// scan against plainByte: the lowest byte it flags is the first byte that
// is not plain, and it flags one if there is one.
func TestNotPlain(t *testing.T) {
	rng := rand.New(rand.NewPCG(testSeed(t), 3))
	special := []byte{0, 0x1f, 0x20, '"', '\\', 0x7f, 0x80, 0x9f, 0xa0, 0xff}
	for range 200_000 {
		var b [8]byte
		for k := range b {
			switch rng.IntN(3) {
			case 0:
				b[k] = special[rng.IntN(len(special))]
			case 1:
				b[k] = byte(rng.IntN(256))
			default:
				b[k] = 'a' + byte(rng.IntN(26))
			}
		}
		want := 8
		for k, c := range b {
			if !plainByte[c] {
				want = k
				break
			}
		}
		got := 8
		if m := notPlain(binary.LittleEndian.Uint64(b[:])); m != 0 {
			got = bits.TrailingZeros64(m) / 8
		}
		if got != want {
			t.Fatalf("notPlain(% x): first byte not plain at %d, want %d", b, got, want)
		}
	}
}

// encodesAsJSON checks that Encode writes r as encoding/json does, or fails
// as it does.
func encodesAsJSON(t *testing.T, r *Record) {
	t.Helper()
	got, err := Encode(r) // caps r's texts
	want, werr := jsonLine(r)
	if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
		t.Fatalf("Encode error = %v, encoding/json gives %v", err, werr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("Encode =\n%.400q\nencoding/json gives\n%.400q", got, want)
	}
}

// jsonLine is a record's line as encoding/json renders it (the format's
// definition), with its checksum; r's texts are already capped.
func jsonLine(r *Record) ([]byte, error) {
	body, err := encodeJSON(r)
	if err != nil {
		return nil, err
	}
	line := fmt.Appendf(bytes.Clone(body[:len(body)-1]), `,"crc":"%08x"}`, crc32.Checksum(body, castagnoli))
	return append(line, '\n'), nil
}

// TestEncodeMatchesJSON encodes records of every kind with Encode and
// with encoding/json and wants the same bytes, or the same error. fast says
// whether appendRecord itself must take the record: every record a step's
// attempt writes, so that the comparison is not of json with itself.
func TestEncodeMatchesJSON(t *testing.T) {
	type rec struct {
		r    *Record
		fast bool
	}
	var recs []rec
	for _, r := range logRecords(testTask, sampleRecords()) {
		recs = append(recs, rec{r, r.Start == nil && r.Summary == nil && r.Marker == nil && r.Intervention == nil})
	}
	flat := fullRecord()
	flat.Start, flat.Summary, flat.Marker, flat.Intervention = nil, nil, nil, nil
	recs = append(recs, rec{fullRecord(), false}, rec{flat, true}, rec{benchRecord(3), true})
	escapes := []string{"", "plain text", `"quoted"`, `back\slash`, "<&>", "tab\there", "nl\n\r\b\f\x00\x1f\x7f",
		"é🦀", "\u2028\u2029", "bad \xff\xfe byte", "\xe2\x80", strings.Repeat("x", 5000)}
	for i, s := range escapes {
		recs = append(recs, rec{&Record{Seq: int64(i), Timestamp: s, TaskID: s, StepID: s, EventType: s, Status: s,
			InputDigest: s, OutputDigest: s, ErrorMessage: s, Message: s, RetryCount: -i, DurationMS: -1 << 62}, true})
	}
	for _, out := range []struct {
		raw  string
		fast bool
	}{
		{`{"a":[1,-2.5e3,"x\"y",null,true,{}]}`, true},
		{`"a string with spaces and <&> and é and ` + "\u2028" + `"`, true},
		{`"a \\ backslash \" quote"`, true},
		{`null`, true},
		{`{"a": 1}`, false}, // white space that encoding/json drops
		{"[1,\n2]", false},
		{` 7 `, false},
		{`{"a":`, false}, // not JSON: the same error as encoding/json's
		{`{"a":1}x`, false},
		{"\"bad \xff\"", true}, // json.Valid takes invalid UTF-8 in a string, as encoding/json does
	} {
		recs = append(recs, rec{&Record{EventType: StepEnd, Status: Success, Output: json.RawMessage(out.raw)}, out.fast})
	}
	one := 1
	recs = append(recs, rec{&Record{EventType: StepEnd, ExitCode: &one, PGID: -2, NextDelayMS: 1, Interrupted: true}, true},
		rec{&Record{EventType: StepEnd, ExitCode: new(int)}, true})
	for i, c := range recs {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			encodesAsJSON(t, c.r)
			if _, ok := appendRecord(nil, c.r); ok != c.fast {
				t.Errorf("appendRecord took the record: %v, want %v", ok, c.fast)
			}
		})
	}
}
