package eventlog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// corrupt is the CorruptError a case expects.
type corrupt struct {
	line   int
	reason string // a substring of Reason
}

func TestRead(t *testing.T) {
	good, lines := sampleLog(t)
	n := len(lines)
	flip := func(line []byte, i int) []byte {
		b := bytes.Clone(line)
		b[i] ^= 0x04
		return b
	}
	// next is what the writer would append after the sample log.
	next := encodeLines(t, []*Record{{Seq: int64(n + 1), TaskID: testTask, Timestamp: ts(99),
		EventType: StepStart, StepID: "report", Status: Running}})[0]
	other := encodeLines(t, logRecords("t2", sampleRecords()))
	rng := rand.New(rand.NewPCG(1, 2))
	garbage := make([]byte, 3000)
	for i := range garbage {
		garbage[i] = byte(rng.IntN(256))
	}
	drop := func(k int) []byte { // the log without line k (1-based)
		return join(join(lines[:k-1]...), join(lines[k:]...))
	}
	unknown := withCRC(`{"seq":12,"timestamp":"` + ts(50) + `","task_id":"t1","step_id":"x","event_type":"FUTURE_EVENT",` +
		`"status":"RUNNING","retry_count":0,"input_digest":"","output_digest":"","error_message":"","duration_ms":0,` +
		`"future_field":{"a":[1,2,3]},"z":null}`)
	unknownFields := withCRC(`{"seq":13,"timestamp":"` + ts(51) + `","task_id":"t1","step_id":"fetch","event_type":"STEP_START",` +
		`"status":"RUNNING","retry_count":3,"input_digest":"","output_digest":"","error_message":"","duration_ms":0,` +
		`"cpu_ms":17,"labels":["a"]}`)
	backwards := logRecords(testTask, sampleRecords())
	for i, r := range backwards {
		r.Timestamp = ts(-i * 3600)
	}
	notStart := logRecords(testTask, sampleRecords()[1:])
	noStartBody := logRecords(testTask, sampleRecords())
	noStartBody[0].Start = nil
	huge := logRecords(testTask, sampleRecords())
	huge[2].Output = []byte(`"` + strings.Repeat("x", 600<<10) + `"`) // over the read buffer, under the limit
	// Lines over the limit: 64 MiB apiece to build, write and read, seconds
	// each; left out under -short.
	var overLimit, overLimitAtEnd []byte
	if !testing.Short() {
		big := bytes.Repeat([]byte("y"), MaxLineBytes+10)
		big[len(big)-1] = '\n'
		overLimit = join(join(lines[:6]...), big, join(lines[6:]...))
		overLimitAtEnd = join(good, big[:len(big)-1])
	}
	crlf := bytes.ReplaceAll(good, []byte("\n"), []byte("\r\n"))
	// What a power cut leaves of unsynced appends persisted out of order:
	// zeros from the end of the good lines to a block boundary (a block
	// that never reached the disk), the rest of the line that began there,
	// then later records that did reach it.
	toBlock := make([]byte, tornBlock-len(good)%tornBlock)
	later := func(seqs ...int64) []byte {
		recs := make([]*Record, len(seqs))
		for i, q := range seqs {
			recs[i] = &Record{Seq: q, TaskID: testTask, EventType: StepStart, StepID: "x"}
		}
		return join(encodeLines(t, recs)...)
	}
	restOfLine := []byte(`","duration_ms":0,"crc":"0badf00d"}` + "\n")
	foreign := encodeLines(t, []*Record{{Seq: int64(n + 2), TaskID: "another", EventType: StepStart}})[0]

	tests := []struct {
		name     string
		data     []byte
		opts     ReadOptions
		wantSeqs []int64
		wantTorn int64
		wantErr  *corrupt
		slow     bool // skipped under -short
	}{
		{name: "good log", data: good, wantSeqs: oneToN(n)},
		{name: "good log, task checked", data: good, opts: ReadOptions{TaskID: testTask}, wantSeqs: oneToN(n)},
		{name: "empty file", data: nil, wantSeqs: []int64{}},
		{name: "torn tail: half a line", data: join(good, next[:len(next)/2]), wantSeqs: oneToN(n), wantTorn: int64(len(next) / 2)},
		{name: "torn tail: one byte", data: join(good, next[:1]), wantSeqs: oneToN(n), wantTorn: 1},
		{name: "torn tail: a whole record but its newline", data: join(good, next[:len(next)-1]),
			wantSeqs: oneToN(n), wantTorn: int64(len(next) - 1)},
		{name: "torn tail: zeros", data: join(good, make([]byte, 4096)), wantSeqs: oneToN(n), wantTorn: 4096},
		{name: "torn tail: zeros and newlines", data: join(good, make([]byte, 100), []byte("\n"), make([]byte, 600), []byte("\n")),
			wantSeqs: oneToN(n), wantTorn: 702},
		{name: "torn tail: random bytes", data: join(good, garbage), wantSeqs: oneToN(n), wantTorn: int64(len(garbage))},
		{name: "torn tail: 0xff", data: join(good, []byte{0xff}), wantSeqs: oneToN(n), wantTorn: 1},
		{name: "torn tail: half a utf-8 sequence", data: join(good, []byte("\xe2\x82")), wantSeqs: oneToN(n), wantTorn: 2},
		{name: "torn tail: blank line", data: join(good, []byte("\n")), wantSeqs: oneToN(n), wantTorn: 1},
		{name: "torn tail: {}", data: join(good, []byte("{}\n")), wantSeqs: oneToN(n), wantTorn: 3},
		{name: "torn tail: last line's checksum damaged", data: join(good, flip(next, 20)), wantSeqs: oneToN(n),
			wantTorn: int64(len(next))},
		{name: "torn tail: damaged line then a torn one", data: join(good, flip(next, 30), next[:40]), wantSeqs: oneToN(n),
			wantTorn: int64(len(next) + 40)},
		{name: "torn first line", data: lines[0][:50], wantSeqs: []int64{}, wantTorn: 50},
		{name: "torn first line: zeros and a newline", data: join(make([]byte, 300), []byte("\n")), wantSeqs: []int64{}, wantTorn: 301},
		{name: "damaged middle line", data: join(join(lines[:2]...), flip(lines[2], 40), join(lines[3:]...)),
			wantSeqs: oneToN(2), wantErr: &corrupt{3, "checksum mismatch"}},
		{name: "damaged first line followed by good ones", data: join(flip(lines[0], 40), join(lines[1:]...)),
			wantSeqs: []int64{}, wantErr: &corrupt{1, "checksum mismatch"}},
		{name: "middle line replaced by text", data: join(join(lines[:4]...), []byte("not json\n"), join(lines[5:]...)),
			wantSeqs: oneToN(4), wantErr: &corrupt{5, ""}},
		{name: "blank line in the middle", data: join(join(lines[:3]...), []byte("\n"), join(lines[3:]...)),
			wantSeqs: oneToN(3), wantErr: &corrupt{4, ""}},
		{name: "damaged line, then garbage, then a good line", data: join(good, flip(next, 9), garbage, []byte("\n"), next),
			wantSeqs: oneToN(n), wantErr: &corrupt{n + 1, "checksum mismatch"}},
		{name: "power cut: zeros to a block boundary, later records (out of order)", data: join(good, toBlock, restOfLine, later(int64(n+2), int64(n+3))),
			opts: ReadOptions{TaskID: testTask}, wantSeqs: oneToN(n),
			wantTorn: int64(len(toBlock) + len(restOfLine) + len(later(int64(n+2), int64(n+3))))},
		{name: "zeros to a block boundary, then the next record itself", data: join(good, toBlock, restOfLine, later(int64(n+1))),
			wantSeqs: oneToN(n), wantErr: &corrupt{n + 1, "a good record (seq"}},
		{name: "zeros to a block boundary, then an earlier record", data: join(good, toBlock, restOfLine, later(int64(n-1))),
			wantSeqs: oneToN(n), wantErr: &corrupt{n + 1, "a good record (seq"}},
		{name: "zeros to a block boundary, then another task's record", data: join(good, toBlock, restOfLine, foreign),
			opts: ReadOptions{TaskID: testTask}, wantSeqs: oneToN(n), wantErr: &corrupt{n + 1, "a good record (seq"}},
		{name: "zeros, then a later record (out of order)", data: join(good, make([]byte, 512), []byte("\n"),
			encodeLines(t, []*Record{{Seq: int64(n + 2), TaskID: testTask, EventType: StepStart}})[0]),
			wantSeqs: oneToN(n), wantErr: &corrupt{n + 1, ""}},
		{name: "damaged line end between the last two records", data: join(join(lines[:n-2]...), lines[n-2][:len(lines[n-2])-1], []byte{'\v'}, lines[n-1]),
			wantSeqs: oneToN(n - 2), wantErr: &corrupt{n - 1, "line end"}},
		{name: "damaged line end, last newline missing too", data: join(join(lines[:n-2]...), lines[n-2][:len(lines[n-2])-1], []byte{'\v'}, lines[n-1][:len(lines[n-1])-1]),
			wantSeqs: oneToN(n - 2), wantErr: &corrupt{n - 1, "line end"}},
		{name: "damaged line end before a torn record (cannot tell)", data: join(good, next[:len(next)-1], []byte{0}, next[:30]),
			wantSeqs: oneToN(n), wantTorn: int64(len(next) + 30)},
		{name: "torn tail: a record, then zeros where its newline was", data: join(good, next[:len(next)-1], make([]byte, 4000)),
			wantSeqs: oneToN(n), wantTorn: int64(len(next) - 1 + 4000)},
		{name: "seq gap", data: drop(4), wantSeqs: oneToN(3), wantErr: &corrupt{4, "seq 5 follows 3"}},
		{name: "seq gap on the last line", data: drop(n - 1), wantSeqs: oneToN(n - 2), wantErr: &corrupt{n - 1, "follows"}},
		{name: "duplicated line", data: join(join(lines[:3]...), lines[2], join(lines[3:]...)),
			wantSeqs: oneToN(3), wantErr: &corrupt{4, "seq 3 follows 3"}},
		{name: "swapped lines", data: join(join(lines[:3]...), lines[4], lines[3], join(lines[5:]...)),
			wantSeqs: oneToN(3), wantErr: &corrupt{4, "seq 5 follows 3"}},
		{name: "record of another task", data: join(join(lines[:5]...), other[5], join(lines[6:]...)),
			opts: ReadOptions{TaskID: testTask}, wantSeqs: oneToN(5), wantErr: &corrupt{6, `task "t2"`}},
		{name: "log of another task", data: join(other...), opts: ReadOptions{TaskID: testTask},
			wantSeqs: []int64{}, wantErr: &corrupt{1, `task "t2"`}},
		{name: "first line not a TASK_START", data: join(encodeLines(t, notStart)...), wantSeqs: []int64{},
			wantErr: &corrupt{1, "not a TASK_START"}},
		{name: "TASK_START without start", data: join(encodeLines(t, noStartBody)...), wantSeqs: []int64{},
			wantErr: &corrupt{1, "not a TASK_START"}},
		{name: "line over MaxLineBytes", data: overLimit, slow: true, wantSeqs: oneToN(6),
			wantErr: &corrupt{7, "longer than"}},
		{name: "line over MaxLineBytes at the end, no newline", data: overLimitAtEnd, slow: true, wantSeqs: oneToN(n),
			wantErr: &corrupt{n + 1, "longer than"}},
		{name: "long line under the limit", data: join(encodeLines(t, huge)...), wantSeqs: oneToN(n)},
		{name: "unknown event type and fields", data: join(good, unknown, unknownFields), wantSeqs: oneToN(n + 2)},
		{name: "decreasing timestamps", data: join(encodeLines(t, backwards)...), wantSeqs: oneToN(n)},
		{name: "CRLF line ends", data: crlf, wantSeqs: []int64{}, wantErr: &corrupt{1, "CR LF"}},
		{name: "UTF-8 byte order mark", data: join([]byte("\ufeff"), good), wantSeqs: []int64{}, wantErr: &corrupt{1, "byte order mark"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.slow && testing.Short() {
				t.Skip("-short: a 64 MiB line takes seconds to build, write and read; run without -short")
			}
			path := writeLog(t, tt.data)
			before := fileSum(t, path)
			var got []*Record
			tail, err := Read(path, tt.opts, func(r *Record) error {
				got = append(got, r)
				return nil
			})
			if gotSeqs := seqs(got); !reflect.DeepEqual(gotSeqs, tt.wantSeqs) {
				t.Errorf("Read visited seq %v, want %v", gotSeqs, tt.wantSeqs)
			}
			if after := fileSum(t, path); after != before {
				t.Errorf("Read modified the file")
			}
			if tt.wantErr != nil {
				var ce *CorruptError
				if !errors.As(err, &ce) {
					t.Fatalf("Read = %v, want a *CorruptError", err)
				}
				if ce.Path != path || ce.Line != tt.wantErr.line || !strings.Contains(ce.Reason, tt.wantErr.reason) {
					t.Errorf("Read = %s:%d: %s, want %s:%d: …%s…", ce.Path, ce.Line, ce.Reason, path, tt.wantErr.line, tt.wantErr.reason)
				}
				if !strings.Contains(err.Error(), path) {
					t.Errorf("error %q does not name the file", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Read = %v, want no error", err)
			}
			size := int64(len(tt.data))
			if got, want := tail.Torn, tt.wantTorn; got != want {
				t.Errorf("Tail.Torn = %d, want %d", got, want)
			}
			if got, want := tail.End, size-tt.wantTorn; got != want {
				t.Errorf("Tail.End = %d, want %d", got, want)
			}
			if got, want := tail.Lines, len(tt.wantSeqs); got != want {
				t.Errorf("Tail.Lines = %d, want %d", got, want)
			}
			if len(got) > 0 {
				if got, want := tail.LastSeq, got[len(got)-1].Seq; got != want {
					t.Errorf("Tail.LastSeq = %d, want %d", got, want)
				}
				if got, want := tail.Version, Version; got != want {
					t.Errorf("Tail.Version = %d, want %d", got, want)
				}
			}
		})
	}
}

// TestReadVisitsWhatWasWritten compares decoded records, not bytes.
func TestReadVisitsWhatWasWritten(t *testing.T) {
	want := logRecords(testTask, sampleRecords())
	got, _, err := ReadAll(writeLog(t, bytes.Join(encodeLines(t, want), nil)), ReadOptions{TaskID: testTask})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ReadAll = %+v, want %+v", got, want)
	}
}

func TestReadUnknownEventReplaysAsNothing(t *testing.T) {
	good, _ := sampleLog(t)
	unknown := withCRC(`{"seq":12,"timestamp":"` + ts(50) + `","task_id":"t1","step_id":"load","event_type":"FUTURE_EVENT",` +
		`"status":"SUCCESS","retry_count":0,"input_digest":"","output_digest":"","error_message":"","duration_ms":0}`)
	recs, _, err := ReadAll(writeLog(t, append(bytes.Clone(good), unknown...)), ReadOptions{TaskID: testTask})
	if err != nil {
		t.Fatal(err)
	}
	withUnknown, without := Replay(testTask, recs), Replay(testTask, recs[:len(recs)-1])
	if got, want := withUnknown.Steps["load"], without.Steps["load"]; !reflect.DeepEqual(got, want) {
		t.Errorf("after an unknown event, step load = %+v, want %+v", got, want)
	}
}

func TestReadVisitError(t *testing.T) {
	good, _ := sampleLog(t)
	stop := errors.New("stop")
	visited := 0
	_, err := Read(writeLog(t, good), ReadOptions{}, func(r *Record) error {
		visited++
		if r.Seq == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || visited != 3 {
		t.Errorf("Read with a failing visit = %v after %d records, want %v after 3", err, visited, stop)
	}
}

func TestReadFromOffset(t *testing.T) {
	good, lines := sampleLog(t)
	path := writeLog(t, good)
	off := int64(len(bytes.Join(lines[:4], nil)))
	recs, tail, err := ReadAll(path, ReadOptions{TaskID: testTask, Offset: off, Seq: 4})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqs(recs), oneToN(len(lines))[4:]; !reflect.DeepEqual(got, want) {
		t.Errorf("Read from offset %d visited seq %v, want %v", off, got, want)
	}
	if got, want := tail.End, int64(len(good)); got != want {
		t.Errorf("Tail.End = %d, want %d", got, want)
	}
	// A prefix that does not match the log: the first record is not seq+1.
	if _, _, err := ReadAll(path, ReadOptions{Offset: off, Seq: 7}); !errors.As(err, new(*CorruptError)) {
		t.Errorf("Read with a wrong seq for the offset = %v, want a *CorruptError", err)
	}
	// An offset past the end of the log cannot be a prefix of it.
	if _, _, err := ReadAll(path, ReadOptions{Offset: int64(len(good)) + 100, Seq: 4}); err == nil {
		t.Errorf("Read from an offset past the end succeeded, want an error")
	}
}

func TestReadMissingFile(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), "nope.jsonl"), ReadOptions{}, func(*Record) error { return nil })
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read(missing) = %v, want os.ErrNotExist", err)
	}
}

// TestReadTruncationSweep cuts the log at every byte: Read returns exactly
// the records that end at or before the cut, and calls the rest torn; at
// every record boundary ±2 a writer repairs the cut and appends.
func TestReadTruncationSweep(t *testing.T) {
	good, lines := sampleLog(t)
	var ends []int // offset just past each line
	for _, l := range lines {
		ends = append(ends, l2end(ends)+len(l))
	}
	nearBoundary := func(cut int) bool {
		for _, e := range ends {
			if cut >= e-2 && cut <= e+2 {
				return true
			}
		}
		return false
	}
	path := writeLog(t, good)
	repairs := 0
	for cut := len(good); cut >= 0; cut-- {
		if err := os.Truncate(path, int64(cut)); err != nil {
			t.Fatal(err)
		}
		recs, tail, err := ReadAll(path, ReadOptions{TaskID: testTask})
		whole := 0
		for whole < len(ends) && ends[whole] <= cut {
			whole++
		}
		if err != nil || len(recs) != whole || tail.End != int64(l2end(ends[:whole])) || tail.End+tail.Torn != int64(cut) {
			t.Fatalf("cut at %d: %d records, Tail{End: %d, Torn: %d}, %v; want %d records ending at %d",
				cut, len(recs), tail.End, tail.Torn, err, whole, l2end(ends[:whole]))
		}
		if !nearBoundary(cut) {
			continue
		}
		repairs++
		path := writeLog(t, good[:cut])
		w := openLog(t, path, WriterOptions{Durability: Batch, FS: &faultFS{noSync: true}})
		r := stepStart("after")
		if whole == 0 {
			r = taskStart()
		}
		mustAppend(t, w, r)
		mustClose(t, w)
		after := readClean(t, path)
		want := whole + 1
		if tail.Torn > 0 && whole > 0 {
			want++ // the torn_tail WARNING
		}
		if len(after) != want {
			t.Fatalf("cut at %d, repaired: %d records, want %d", cut, len(after), want)
		}
	}
	t.Logf("%d cuts, %d repaired and appended to", len(good)+1, repairs)
}

func l2end(ends []int) int {
	if len(ends) == 0 {
		return 0
	}
	return ends[len(ends)-1]
}

// TestReadDetectsEveryMiddleBitFlip flips every bit of a middle line of a
// log, in place: each flip is corruption at that line, never a torn tail.
func TestReadDetectsEveryMiddleBitFlip(t *testing.T) {
	good, lines := sampleLog(t)
	path := writeLog(t, good)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	poke := func(i int, b byte) {
		t.Helper()
		if _, err := f.WriteAt([]byte{b}, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	flips := 0
	for _, k := range []int{2, len(lines) - 1} { // 1-based line number
		start := len(bytes.Join(lines[:k-1], nil))
		for i := start; i < start+len(lines[k-1]); i++ {
			for bit := range 8 {
				poke(i, good[i]^1<<bit)
				_, err := Read(path, ReadOptions{TaskID: testTask}, func(*Record) error { return nil })
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Line != k {
					t.Fatalf("bit %d of byte %d (line %d) flipped: Read = %v, want a CorruptError at line %d", bit, i, k, err, k)
				}
				flips++
			}
			poke(i, good[i])
		}
	}
	if got := readFile(t, path); !bytes.Equal(got, good) {
		t.Fatalf("the log was not restored")
	}
	t.Logf("%d flips in lines 2 and %d, all corruption at their line", flips, len(lines)-1)
}

// bigStart is the TASK_START of a pipeline of n steps, each depending on
// the one before, as the engine writes it.
func bigStart(n int) *Record {
	start := startInfo(Version)
	start.Steps = make([]StepInfo, n)
	for i := range start.Steps {
		deps := []string{}
		if i > 0 {
			deps = []string{fmt.Sprintf("step-%06d", i-1)}
		}
		start.Steps[i] = StepInfo{ID: fmt.Sprintf("step-%06d", i), DependsOn: deps, DefinitionDigest: digest(fmt.Sprint(i))}
	}
	return &Record{EventType: TaskStart, Status: Running, Start: start}
}

// TestReadLongTaskStart: a TASK_START over 1 MiB (the old MaxLineBytes) is
// written, read back and replayed; cut short at the end of the log it is a
// torn tail, and damaged with a good record after it, corruption.
func TestReadLongTaskStart(t *testing.T) {
	const steps = 15_000
	path := newLogPath(t)
	w := openLog(t, path, WriterOptions{Durability: Batch})
	mustAppend(t, w, bigStart(steps), stepStart("step-000000"),
		&Record{EventType: StepEnd, StepID: "step-000000", Status: Success, Output: json.RawMessage(`{"n":1}`)})
	mustAppend(t, w, bigStart(steps)) // a second invocation
	mustClose(t, w)
	good := readFile(t, path)
	lines := bytes.SplitAfter(good, []byte("\n"))[:4]
	if len(lines[0]) <= 1<<20 || len(lines[3]) <= 1<<20 {
		t.Fatalf("TASK_START lines of %d and %d bytes, want both over 1 MiB", len(lines[0]), len(lines[3]))
	}

	recs := readClean(t, path)
	if len(recs) != 4 || len(recs[0].Start.Steps) != steps || !reflect.DeepEqual(recs[0].Start, bigStart(steps).Start) {
		t.Fatalf("ReadAll = %d records, want 4 with the %d-step TASK_START as written", len(recs), steps)
	}
	st := Replay(testTask, recs)
	if st.Invocations != 2 || len(st.Steps) != steps || len(st.Order) != steps ||
		st.Steps["step-000000"].Status != Success || st.Steps["step-014999"].Status != Pending {
		t.Errorf("Replay = %d invocations, %d steps, first %+v, last %+v; want 2, %d, SUCCESS, PENDING",
			st.Invocations, len(st.Steps), st.Steps["step-000000"], st.Steps["step-014999"], steps)
	}

	prefix := bytes.Join(lines[:3], nil)
	start := lines[3]
	flip := func(line []byte, i int) []byte {
		b := bytes.Clone(line)
		b[i] ^= 0x04
		return b
	}
	tests := []struct {
		name     string
		data     []byte
		wantTorn int
		wantErr  *corrupt
	}{
		{name: "cut in the middle", data: join(prefix, start[:len(start)/2]), wantTorn: len(start) / 2},
		{name: "all but its newline", data: join(prefix, start[:len(start)-1]), wantTorn: len(start) - 1},
		{name: "damaged, at the end", data: join(prefix, flip(start, len(start)/2)), wantTorn: len(start)},
		{name: "damaged, then garbage", data: join(prefix, flip(start, 100), make([]byte, 5000)), wantTorn: len(start) + 5000},
		{name: "damaged, then a good record", data: join(prefix, flip(start, len(start)/2), lines[1]),
			wantErr: &corrupt{4, "checksum mismatch"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, tail, err := ReadAll(writeLog(t, tt.data), ReadOptions{TaskID: testTask})
			if tt.wantErr != nil {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Line != tt.wantErr.line || !strings.Contains(ce.Reason, tt.wantErr.reason) {
					t.Fatalf("Read = %v, want a CorruptError at line %d (%s)", err, tt.wantErr.line, tt.wantErr.reason)
				}
				return
			}
			if err != nil || len(recs) != 3 || tail.End != int64(len(prefix)) || tail.Torn != int64(tt.wantTorn) {
				t.Fatalf("Read = %d records, Tail{End: %d, Torn: %d}, %v; want 3, %d, %d, nil",
					len(recs), tail.End, tail.Torn, err, len(prefix), tt.wantTorn)
			}
		})
	}
}

func join(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestScanAheadSame: reading ahead in chunks decoded in parallel (as a big
// log is read) gives what reading line by line gives (records, tail and
// error), for a good log and for every damage: cut anywhere, a byte changed
// in any line, lines dropped, repeated or of another task, garbage after
// the end, a line longer than a chunk, and a visit that fails. Under
// -short the log is cut near each line's end and every 50th byte only,
// not at each of its 4,000 bytes.
func TestScanAheadSame(t *testing.T) {
	good, lines := sampleLog(t)
	logs := map[string][]byte{"good": good}
	ends := map[int]bool{}
	end := 0
	for _, l := range lines {
		end += len(l)
		for d := -2; d <= 2; d++ {
			ends[end+d] = true
		}
	}
	for cut := range len(good) {
		if testing.Short() && !ends[cut] && cut%50 != 0 {
			continue
		}
		logs[fmt.Sprint("cut at ", cut)] = good[:cut]
	}
	for i, l := range lines {
		for _, at := range []int{0, len(l) / 2, len(l) - 2, len(l) - 1} {
			b := join(bytes.Join(lines[:i], nil), l, bytes.Join(lines[i+1:], nil))
			b[len(bytes.Join(lines[:i], nil))+at] ^= 0x04
			logs[fmt.Sprintf("line %d, byte %d changed", i+1, at)] = b
		}
		logs[fmt.Sprint("line dropped ", i+1)] = join(bytes.Join(lines[:i], nil), bytes.Join(lines[i+1:], nil))
		logs[fmt.Sprint("line repeated ", i+1)] = join(bytes.Join(lines[:i+1], nil), bytes.Join(lines[i:], nil))
	}
	logs["garbage after"] = join(good, []byte("\x00\x00garbage\n"))
	logs["garbage, then a good line"] = join(good, []byte("garbage\n"), lines[1])
	long := encodeLines(t, logRecords(testTask, []*Record{bigStart(50)}))[0]
	logs["long line"] = join(long, good[len(lines[0]):])
	logs["long line cut"] = long[:len(long)/2]
	for name, data := range logs {
		tasks, stops := []string{testTask}, []int64{0}
		if name == "good" {
			tasks, stops = []string{testTask, "other", ""}, []int64{0, 1, 3, int64(len(lines))}
		}
		for _, taskID := range tasks {
			for _, size := range []int{64, 700} {
				for _, stopAt := range stops {
					opts := ReadOptions{TaskID: taskID}
					var seqRecs, aheadRecs []*Record
					visit := func(recs *[]*Record) func(*Record) error {
						return func(r *Record) error {
							*recs = append(*recs, r)
							if r.Seq == stopAt {
								return errors.New("visit failed")
							}
							return nil
						}
					}
					wantTail, err := scanLines(bytes.NewReader(data), 4096, "log", opts, Tail{}, 0, visit(&seqRecs))
					gotTail, gerr := scanAhead(bytes.NewReader(data), size, "log", opts, Tail{}, 0, visit(&aheadRecs))
					if fmt.Sprint(gerr) != fmt.Sprint(err) || gotTail != wantTail || !reflect.DeepEqual(aheadRecs, seqRecs) {
						t.Fatalf("%s, task %s, chunks of %d, visit failing at seq %d: read ahead: %d records, %+v, %v; line by line: %d records, %+v, %v",
							name, taskID, size, stopAt, len(aheadRecs), gotTail, gerr, len(seqRecs), wantTail, err)
					}
				}
			}
		}
	}
}

// TestCorruptErrorUnwraps: a line that does not decode keeps the decoder's
// error in the chain (errors.Is/As reach it); a good line in the wrong place
// has none. Neither message names a command or flag: that advice is the
// caller's.
func TestCorruptErrorUnwraps(t *testing.T) {
	_, lines := sampleLog(t)
	damaged := bytes.Clone(lines[2])
	damaged[len(damaged)-4] ^= 1 // the crc
	tests := []struct {
		name    string
		data    [][]byte
		wantErr bool
	}{
		{"damaged line", [][]byte{lines[0], lines[1], damaged, lines[3]}, true},
		{"gap in seq", [][]byte{lines[0], lines[1], lines[3]}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeLog(t, bytes.Join(tt.data, nil))
			_, err := Read(path, ReadOptions{}, func(*Record) error { return nil })
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Line != 3 {
				t.Fatalf("Read = %v, want a *CorruptError at line 3", err)
			}
			if got := errors.Unwrap(err) != nil; got != tt.wantErr {
				t.Errorf("errors.Unwrap(%v) != nil is %v, want %v", err, got, tt.wantErr)
			}
			if strings.Contains(err.Error(), "--") || strings.Contains(err.Error(), "apollo ") {
				t.Errorf("message %q names a command or flag", err)
			}
		})
	}
}
