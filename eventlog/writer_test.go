package eventlog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"weak"
)

// faultFS is the real file system with a count of every Write and Sync on
// the files it opens; it can fail the Nth Write or Sync, cut a write short,
// and hold a Sync until the test lets it go.
type faultFS struct {
	OS

	mu        sync.Mutex
	writes    int // Write calls so far
	syncs     int // Sync calls so far
	dirSyncs  []string
	failWrite int   // fail this Write (1-based); 0: none
	failSync  int   // fail this Sync (1-based); 0: none
	errno     error // what the failing call returns
	short     bool  // the failing Write writes half its bytes first
	failed    bool
	afterFail []string // calls made on the file after the fault
	synced    int64    // the file's size at the last good Sync
	// beforeSync, if set, runs (without mu) before the nth Sync.
	beforeSync func(n int)
	// afterWrite, if set, runs (without mu) after the nth Write.
	afterWrite func(n int)
	// noSync skips every fsync, for tests of logic rather than durability.
	noSync bool
}

func (fs *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fs: fs}, nil
}

func (fs *faultFS) SyncDir(dir string) error {
	fs.mu.Lock()
	fs.dirSyncs = append(fs.dirSyncs, dir)
	fs.mu.Unlock()
	if fs.noSync {
		return nil
	}
	return OS{}.SyncDir(dir)
}

func (fs *faultFS) WriteFile(name string, data []byte, perm os.FileMode) error {
	if fs.noSync {
		return os.WriteFile(name, data, perm)
	}
	return OS{}.WriteFile(name, data, perm)
}

func (fs *faultFS) counts() (writes, syncs int, afterFail []string, synced int64) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	return fs.writes, fs.syncs, append([]string(nil), fs.afterFail...), fs.synced
}

type faultFile struct {
	*os.File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	fs := f.fs
	fs.mu.Lock()
	fs.writes++
	n := fs.writes
	if fs.failed {
		fs.afterFail = append(fs.afterFail, fmt.Sprintf("write %d", n))
	}
	fail := n == fs.failWrite
	if fail {
		fs.failed = true
	}
	fs.mu.Unlock()
	if fs.afterWrite != nil {
		defer fs.afterWrite(n)
	}
	if !fail {
		return f.File.Write(p)
	}
	if !fs.short {
		return 0, fs.errno
	}
	k, err := f.File.Write(p[:len(p)/2])
	if err != nil {
		return k, err
	}
	return k, fs.errno // nil: a short write without an error
}

func (f *faultFile) Sync() error {
	fs := f.fs
	fs.mu.Lock()
	fs.syncs++
	n := fs.syncs
	if fs.failed {
		fs.afterFail = append(fs.afterFail, fmt.Sprintf("sync %d", n))
	}
	fail := n == fs.failSync
	if fail {
		fs.failed = true
	}
	fs.mu.Unlock()
	if fs.beforeSync != nil {
		fs.beforeSync(n)
	}
	if fail {
		return fs.errno
	}
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	if !fs.noSync {
		if err := f.File.Sync(); err != nil {
			return err
		}
	}
	fs.mu.Lock()
	fs.synced = fi.Size()
	fs.mu.Unlock()
	return nil
}

func newLogPath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "task_t1_1735787045.jsonl")
}

func openLog(t testing.TB, path string, opts WriterOptions) *Writer {
	t.Helper()
	if opts.TaskID == "" {
		opts.TaskID = testTask
	}
	if opts.Now == nil {
		opts.Now = fixedNow
	}
	w, err := Open(path, opts, nil)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return w
}

func mustAppend(t testing.TB, w *Writer, recs ...*Record) {
	t.Helper()
	for _, r := range recs {
		if err := w.Append(r); err != nil {
			t.Fatalf("Append(%s): %v", r.EventType, err)
		}
	}
}

func mustClose(t testing.TB, w *Writer) {
	t.Helper()
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

func readClean(t testing.TB, path string) []*Record {
	t.Helper()
	recs, tail, err := ReadAll(path, ReadOptions{TaskID: testTask})
	if err != nil {
		t.Fatalf("ReadAll(%s): %v", path, err)
	}
	if tail.Torn != 0 {
		t.Fatalf("ReadAll(%s): %d-byte torn tail, want none", path, tail.Torn)
	}
	if got, want := seqs(recs), oneToN(len(recs)); !reflect.DeepEqual(got, want) {
		t.Fatalf("ReadAll(%s) seq = %v, want %v", path, got, want)
	}
	return recs
}

func taskStart() *Record {
	return &Record{EventType: TaskStart, Status: Running, Start: startInfo(Version)}
}

func stepStart(id string) *Record {
	return &Record{EventType: StepStart, StepID: id, Status: Running}
}

func TestOpenCreates(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "task_t1_1735787045.jsonl")
	fs := &faultFS{}
	w := openLog(t, path, WriterOptions{FS: fs, Create: true})
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if want := []string{filepath.Base(path)}; !reflect.DeepEqual(names, want) {
		t.Errorf("folder holds %v, want %v", names, want)
	}
	if got, want := fs.dirSyncs, []string{dir}; !reflect.DeepEqual(got, want) {
		t.Errorf("Open synced folders %v, want %v", got, want)
	}
	mustAppend(t, w, taskStart())
	mustClose(t, w)
	if recs := readClean(t, path); len(recs) != 1 {
		t.Errorf("log holds %d records, want 1", len(recs))
	}
	// Create refuses an existing log.
	if _, err := Open(path, WriterOptions{TaskID: testTask, Create: true}, nil); !errors.Is(err, os.ErrExist) {
		t.Errorf("Open(existing, Create) = %v, want os.ErrExist", err)
	}
}

// TestOpenCreatesWithFirst: a log created with its first record exists only
// once that record is durable — a crash or fault before then leaves no log
// under its name, at most a temporary file (a fault removes it; a crash may
// leave it, and TempPattern finds it).
func TestOpenCreatesWithFirst(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "task_t1_1735787045.jsonl")
	var seen []string
	fs := &faultFS{}
	w, err := Open(path, WriterOptions{TaskID: testTask, FS: fs, Create: true, First: taskStart(),
		Crash: func(p string) {
			if _, err := os.Stat(path); p == "write:TASK_START" && err == nil {
				t.Errorf("log exists before its first record is fsynced")
			}
			seen = append(seen, p)
		}}, func(r *Record) error {
		seen = append(seen, "visit:"+r.EventType)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"write:TASK_START", "fsync:TASK_START", "visit:TASK_START"}; !reflect.DeepEqual(seen, want) {
		t.Errorf("creation went %v, want %v", seen, want)
	}
	if _, syncs, _, _ := fs.counts(); syncs != 1 || !reflect.DeepEqual(fs.dirSyncs, []string{dir}) {
		t.Errorf("creation made %d fsyncs and synced folders %v, want 1 and [%s]", syncs, fs.dirSyncs, dir)
	}
	mustAppend(t, w, &Record{EventType: StepStart, StepID: "a"})
	mustClose(t, w)
	recs := readClean(t, path)
	if len(recs) != 2 || recs[0].Seq != 1 || recs[0].EventType != TaskStart || recs[1].Seq != 2 {
		t.Errorf("log holds %+v, want TASK_START seq 1 then seq 2", recs)
	}
	if left, _ := filepath.Glob(TempPattern(path)); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}

	// The fsync of the first record fails: no log, a WriteError.
	path2 := filepath.Join(dir, "task_t1_1735787046.jsonl")
	_, err = Open(path2, WriterOptions{TaskID: testTask, FS: &faultFS{failSync: 1, errno: syscall.EIO}, Create: true, First: taskStart()}, nil)
	var we *WriteError
	if !errors.As(err, &we) || !errors.Is(err, syscall.EIO) {
		t.Errorf("Open with a failing fsync = %v, want a WriteError wrapping EIO", err)
	}
	if _, err := os.Stat(path2); !os.IsNotExist(err) {
		t.Errorf("a log whose first record never became durable exists: %v", err)
	}
	if left, _ := filepath.Glob(TempPattern(path2)); len(left) != 0 {
		t.Errorf("temporary files left behind by the failed creation: %v", left)
	}
}

// TestOpenDropsFirst: once the log is created, the writer does not keep its
// first record (a 100k-step run's TASK_START is large) alive.
func TestOpenDropsFirst(t *testing.T) {
	path := newLogPath(t)
	first := taskStart()
	first.Start.Steps = make([]StepInfo, 100_000)
	kept := weak.Make(first)
	w := openLog(t, path, WriterOptions{Create: true, First: first})
	first = nil
	runtime.GC()
	if kept.Value() != nil {
		t.Errorf("the writer keeps the record it created the log with")
	}
	mustAppend(t, w, stepStart("a"))
	mustClose(t, w)
	if recs := readClean(t, path); len(recs) != 2 || len(recs[0].Start.Steps) != 100_000 {
		t.Errorf("log holds %d records, want the TASK_START (with its steps) and a STEP_START", len(recs))
	}
}

func TestAppendAssignsSeqAndTask(t *testing.T) {
	path := newLogPath(t)
	w := openLog(t, path, WriterOptions{})
	want := sampleRecords()
	want[3].Timestamp = ts(-3600) // kept as given
	want[4].Seq, want[4].TaskID = 99, "someone-else"
	for i, r := range want {
		if err := w.Append(r); err != nil {
			t.Fatal(err)
		}
		if got, wantSeq := r.Seq, int64(i+1); got != wantSeq || r.TaskID != testTask {
			t.Errorf("record %d after Append: seq %d task %q, want %d %q", i, got, r.TaskID, wantSeq, testTask)
		}
		if got, want := w.LastSeq(), int64(i+1); got != want {
			t.Errorf("LastSeq = %d, want %d", got, want)
		}
	}
	if got, want := want[0].Timestamp, FormatTime(t0); got != want {
		t.Errorf("timestamp = %q, want the clock's %q", got, want)
	}
	if got, want := want[3].Timestamp, ts(-3600); got != want {
		t.Errorf("timestamp = %q, want the given %q", got, want)
	}
	if got, want := w.Records(), int64(len(want)); got != want {
		t.Errorf("Records = %d, want %d", got, want)
	}
	mustClose(t, w)
	if got := readClean(t, path); !reflect.DeepEqual(got, want) {
		t.Errorf("log reads back as %+v, want %+v", got, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != w.Offset() {
		t.Errorf("Offset = %d, file size %v (%v)", w.Offset(), fi.Size(), err)
	}
}

func TestReopenContinuesSeq(t *testing.T) {
	path := newLogPath(t)
	w := openLog(t, path, WriterOptions{})
	mustAppend(t, w, taskStart(), stepStart("a"), stepStart("b"))
	mustClose(t, w)

	var seen []*Record
	w, err := Open(path, WriterOptions{TaskID: testTask}, func(r *Record) error {
		seen = append(seen, r)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seqs(seen), oneToN(3); !reflect.DeepEqual(got, want) {
		t.Errorf("Open visited seq %v, want %v", got, want)
	}
	if got := w.LastSeq(); got != 3 {
		t.Errorf("LastSeq after reopen = %d, want 3", got)
	}
	mustAppend(t, w, taskStart(), stepStart("c"))
	mustClose(t, w)
	recs := readClean(t, path)
	if got, want := len(recs), 5; got != want {
		t.Errorf("log holds %d records, want %d", got, want)
	}
	if err := w.Append(stepStart("d")); err == nil {
		t.Errorf("Append after Close succeeded")
	}
}

func TestOpenVisitError(t *testing.T) {
	path := newLogPath(t)
	w := openLog(t, path, WriterOptions{})
	mustAppend(t, w, taskStart())
	mustClose(t, w)
	stop := errors.New("stop")
	if _, err := Open(path, WriterOptions{TaskID: testTask}, func(*Record) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("Open with a failing visit = %v, want %v", err, stop)
	}
}

func TestOpenRepairsTornTail(t *testing.T) {
	good, lines := sampleLog(t)
	n := len(lines)
	next := encodeLines(t, []*Record{{Seq: int64(n + 1), TaskID: testTask, EventType: StepStart, StepID: "x"}})[0]
	badCRC := bytes.Clone(next)
	badCRC[len(badCRC)-4] ^= 1
	tests := []struct {
		name string
		good []byte // the log before the damage
		torn []byte
	}{
		{"half a line", good, next[:len(next)/2]},
		{"a record without its newline", good, next[:len(next)-1]},
		{"zeros", good, make([]byte, 8192)},
		{"zeros and newlines", good, []byte("\x00\x00\n\x00\n")},
		{"bad checksum on the last line", good, badCRC},
		{"damaged line and a torn one", good, append(bytes.Clone(badCRC), next[:10]...)},
		{"the first record cut", nil, lines[0][:len(lines[0])/3]},
		// A power cut that persisted a later block of unsynced appends but
		// not an earlier one: zeros to the block boundary, the rest of that
		// line, then records seq n+2 and n+3.
		{"unsynced appends persisted out of order", good, join(make([]byte, tornBlock-len(good)%tornBlock),
			[]byte(`x","crc":"00000000"}`+"\n"),
			join(encodeLines(t, []*Record{{Seq: int64(n + 2), TaskID: testTask, EventType: StepStart, StepID: "y"},
				{Seq: int64(n + 3), TaskID: testTask, EventType: StepStart, StepID: "z"}})...))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeLog(t, append(bytes.Clone(tt.good), tt.torn...))
			var visited []*Record
			w, err := Open(path, WriterOptions{TaskID: testTask, Now: fixedNow}, func(r *Record) error {
				visited = append(visited, r)
				return nil
			})
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			goodRecs := len(bytes.Split(tt.good, []byte("\n"))) - 1
			if got, want := len(visited), goodRecs; got != want {
				t.Errorf("Open visited %d records, want %d", got, want)
			}
			side := fmt.Sprintf("%s.torn-%d", path, len(tt.good))
			if got, want := sideFiles(t, path), []string{side}; !reflect.DeepEqual(got, want) {
				t.Fatalf("side files %v, want %v", got, want)
			}
			if got := readFile(t, side); !bytes.Equal(got, tt.torn) {
				t.Errorf("side file holds %q, want the cut bytes %q", got, tt.torn)
			}
			if tt.good == nil {
				// A log must start with a TASK_START: the repair of a cut first
				// record leaves an empty log and says so in the side file only.
				mustAppend(t, w, taskStart())
			} else {
				mustAppend(t, w, stepStart("after"))
			}
			mustClose(t, w)
			recs := readClean(t, path)
			if got := readFile(t, path); !bytes.HasPrefix(got, tt.good) {
				t.Errorf("repair changed the good records")
			}
			if tt.good == nil {
				if got := len(recs); got != 1 || recs[0].EventType != TaskStart {
					t.Errorf("after repair of a cut first record the log holds %d records, want just the TASK_START", got)
				}
				return
			}
			if got, want := len(recs), goodRecs+2; got != want {
				t.Fatalf("log holds %d records, want %d", got, want)
			}
			warn := recs[goodRecs]
			if warn.EventType != Warning || warn.Intervention == nil || warn.Intervention.Action != ActionTornTail {
				t.Errorf("record after the good ones = %+v, want a WARNING torn_tail", warn)
			}
			if !strings.Contains(warn.Message, filepath.Base(side)) || !strings.Contains(warn.Message, fmt.Sprint(len(tt.torn))) {
				t.Errorf("WARNING message %q does not name the side file and the size", warn.Message)
			}
		})
	}
}

func TestOpenRefusesCorruptLog(t *testing.T) {
	good, lines := sampleLog(t)
	damaged := bytes.Clone(good)
	damaged[len(lines[0])+30] ^= 0x10
	gap := bytes.Join(append(append([][]byte{}, lines[:3]...), lines[4:]...), nil)
	other := bytes.Join(encodeLines(t, logRecords("t2", sampleRecords())), nil)
	notStart := bytes.Join(encodeLines(t, logRecords(testTask, sampleRecords()[1:])), nil)
	tests := []struct {
		name string
		data []byte
		line int
	}{
		{"damaged middle line", damaged, 2},
		{"damaged middle line and a torn tail", append(bytes.Clone(damaged), "{\"seq"...), 2},
		{"seq gap", gap, 4},
		{"another task's log", other, 1},
		{"first line not a TASK_START", notStart, 1},
		{"CRLF", bytes.ReplaceAll(good, []byte("\n"), []byte("\r\n")), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeLog(t, tt.data)
			before := fileSum(t, path)
			w, err := Open(path, WriterOptions{TaskID: testTask}, nil)
			var ce *CorruptError
			if !errors.As(err, &ce) {
				if w != nil {
					w.Close()
				}
				t.Fatalf("Open = %v, want a *CorruptError", err)
			}
			if ce.Path != path || ce.Line != tt.line {
				t.Errorf("Open = %s:%d, want %s:%d", ce.Path, ce.Line, path, tt.line)
			}
			if after := fileSum(t, path); after != before {
				t.Errorf("Open changed a corrupt log")
			}
			if got := sideFiles(t, path); len(got) != 0 {
				t.Errorf("Open made side files %v for a corrupt log", got)
			}
		})
	}
}

func TestOpenRefusesNewerFormat(t *testing.T) {
	v2 := logRecords(testTask, []*Record{
		{EventType: TaskStart, Start: startInfo(Version + 1)},
		{EventType: StepStart, StepID: "fetch"},
	})
	later := logRecords(testTask, []*Record{
		taskStart(), stepStart("fetch"), {EventType: StepEnd, StepID: "fetch", Status: Success},
		{EventType: TaskStart, Start: startInfo(Version + 1)}, // a newer apollo resumed the task
		{EventType: "STEP_RESET", StepID: "fetch"},
	})
	tests := []struct {
		name     string
		data     []byte
		wantLine int // of the newer TASK_START
	}{
		{"first TASK_START", bytes.Join(encodeLines(t, v2), nil), 1},
		{"first TASK_START, torn tail", append(bytes.Join(encodeLines(t, v2), nil), "{\"se"...), 1},
		{"a later TASK_START", bytes.Join(encodeLines(t, later), nil), 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeLog(t, tt.data)
			before := fileSum(t, path)
			visited := 0
			w, err := Open(path, WriterOptions{TaskID: testTask}, func(*Record) error { visited++; return nil })
			if err == nil {
				w.Close()
				t.Fatalf("Open(log of format v%d) succeeded, want a refusal", Version+1)
			}
			var nf *NewerFormatError
			if !errors.As(err, &nf) || nf.Path != path || nf.Line != tt.wantLine || nf.Version != Version+1 {
				t.Fatalf("Open = %v, want a NewerFormatError for %s:%d v%d", err, path, tt.wantLine, Version+1)
			}
			// What to do about it is the caller's to say: eventlog names no
			// command or flag.
			if want := fmt.Sprintf("%s:%d: ", path, tt.wantLine); !strings.HasPrefix(err.Error(), want) ||
				!strings.Contains(err.Error(), "newer") || strings.Contains(err.Error(), "--") {
				t.Errorf("Open = %q, want it to start %q, say the format is newer and name no flag", err, want)
			}
			if visited != tt.wantLine-1 {
				t.Errorf("Open visited %d records, want the %d before the newer TASK_START", visited, tt.wantLine-1)
			}
			if after := fileSum(t, path); after != before {
				t.Errorf("Open changed a log it refused")
			}
			if got := sideFiles(t, path); len(got) != 0 {
				t.Errorf("Open made side files %v", got)
			}
			if _, tail, err := ReadAll(path, ReadOptions{TaskID: testTask}); err != nil || tail.Version != Version+1 {
				t.Errorf("ReadAll = version %d, %v; want version %d and no error (readers may show it)", tail.Version, err, Version+1)
			}
		})
	}
}

// TestConcurrentAppends: many goroutines, one Writer: every record once, seq
// contiguous, every line whole, and each goroutine's records in its order.
func TestConcurrentAppends(t *testing.T) {
	const goroutines, each = 64, 50
	for _, durability := range []string{Always, Batch} {
		t.Run(durability, func(t *testing.T) {
			path := newLogPath(t)
			w := openLog(t, path, WriterOptions{Durability: durability})
			mustAppend(t, w, taskStart())
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			for g := range goroutines {
				wg.Go(func() {
					for i := range each {
						r := &Record{EventType: StepStart, StepID: fmt.Sprintf("g%02d", g), RetryCount: i,
							Message: strings.Repeat("m", g*7)} // lines of different lengths
						if err := w.Append(r); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			mustClose(t, w)
			recs := readClean(t, path)
			if got, want := len(recs), 1+goroutines*each; got != want {
				t.Fatalf("log holds %d records, want %d", got, want)
			}
			next := map[string]int{}
			for _, r := range recs[1:] {
				if r.RetryCount != next[r.StepID] {
					t.Fatalf("%s: record %d at seq %d, want %d", r.StepID, r.RetryCount, r.Seq, next[r.StepID])
				}
				next[r.StepID]++
			}
			for g := range goroutines {
				if got := next[fmt.Sprintf("g%02d", g)]; got != each {
					t.Errorf("g%02d: %d records, want %d", g, got, each)
				}
			}
			if got, want := int64(len(bytes.Split(readFile(t, path), []byte("\n")))-1), w.Records(); got != want {
				t.Errorf("file has %d lines, writer appended %d records", got, want)
			}
			t.Logf("%s: %d records, %d fsyncs", durability, w.Records(), w.Fsyncs())
		})
	}
}

// TestTwoWriters is apollo run and apollo script on one log: two opens, one
// flock, and each learns of the other's records before it appends.
func TestTwoWriters(t *testing.T) {
	path := newLogPath(t)
	type side struct {
		w       *Writer
		name    string
		foreign []int64
		own     []int64
		opened  int64
	}
	a := &side{name: "a"}
	b := &side{name: "b"}
	open := func(s *side) {
		var err error
		s.w, err = Open(path, WriterOptions{TaskID: testTask, Now: fixedNow, OnForeign: func(r *Record) {
			s.foreign = append(s.foreign, r.Seq)
		}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		s.opened = s.w.LastSeq()
	}
	appendAs := func(s *side, i int) error {
		r := &Record{EventType: Warning, StepID: s.name, RetryCount: i, Message: s.name + strings.Repeat("!", i%37)}
		if err := s.w.Append(r); err != nil {
			return err
		}
		s.own = append(s.own, r.Seq)
		return nil
	}
	open(a)
	mustAppend(t, a.w, taskStart())
	open(b)
	// In lockstep first, so each surely sees the other's records.
	for i := range 10 {
		for _, s := range []*side{a, b} {
			if err := appendAs(s, i); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Then free-running.
	const each = 300
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for _, s := range []*side{a, b} {
		wg.Go(func() {
			for i := 10; i < 10+each; i++ {
				if err := appendAs(s, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	mustClose(t, a.w)
	mustClose(t, b.w)

	recs := readClean(t, path)
	if got, want := len(recs), 1+2*(10+each); got != want {
		t.Fatalf("log holds %d records, want %d", got, want)
	}
	bySeq := map[int64]string{1: "a"} // a wrote the TASK_START
	for _, r := range recs[1:] {
		bySeq[r.Seq] = r.StepID
	}
	for _, s := range []*side{a, b} {
		// s saw, in order, every record of the other between its open and
		// its last append.
		last := s.own[len(s.own)-1]
		var want []int64
		for _, r := range recs {
			if r.Seq > s.opened && r.Seq < last && bySeq[r.Seq] != s.name {
				want = append(want, r.Seq)
			}
		}
		if !reflect.DeepEqual(s.foreign, want) {
			t.Errorf("writer %s: OnForeign saw seq %v, want %v", s.name, s.foreign, want)
		}
		if len(s.foreign) < 10 {
			t.Errorf("writer %s saw %d foreign records, want at least the 10 of the lockstep phase", s.name, len(s.foreign))
		}
		for _, seq := range s.own {
			if bySeq[seq] != s.name {
				t.Errorf("seq %d: written by %s, logged as %q", seq, s.name, bySeq[seq])
			}
		}
	}
}

// TestCatchUpRepairsForeignTornTail: another process left a torn tail (it
// died mid-write); this writer cuts it before its next append.
func TestCatchUpRepairsForeignTornTail(t *testing.T) {
	path := newLogPath(t)
	w := openLog(t, path, WriterOptions{})
	mustAppend(t, w, taskStart(), stepStart("a"))
	end := w.Offset()
	partial := []byte(`{"seq":3,"timestamp":"2025-`)
	appendRaw(t, path, partial)
	mustAppend(t, w, stepStart("b"))
	mustClose(t, w)
	recs := readClean(t, path)
	if got, want := len(recs), 4; got != want {
		t.Fatalf("log holds %d records, want %d", got, want)
	}
	if r := recs[2]; r.EventType != Warning || r.Intervention == nil || r.Intervention.Action != ActionTornTail {
		t.Errorf("record 3 = %+v, want a WARNING torn_tail", r)
	}
	if got := readFile(t, fmt.Sprintf("%s.torn-%d", path, end)); !bytes.Equal(got, partial) {
		t.Errorf("side file = %q, want %q", got, partial)
	}
}

// TestCatchUpCorruption: what another process appended is damaged; the
// writer stops with a CorruptError naming the line, counted from the start
// of the file, and writes nothing.
func TestCatchUpCorruption(t *testing.T) {
	path := newLogPath(t)
	w := openLog(t, path, WriterOptions{})
	mustAppend(t, w, taskStart(), stepStart("a"), stepStart("b"))
	foreign := encodeLines(t, []*Record{
		{Seq: 4, TaskID: testTask, EventType: Warning},
		{Seq: 5, TaskID: testTask, EventType: Warning},
		{Seq: 6, TaskID: testTask, EventType: Warning},
	})
	foreign[1][12] ^= 1
	appendRaw(t, path, bytes.Join(foreign, nil))
	before := fileSum(t, path)
	err := w.Append(stepStart("c"))
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("Append after a damaged foreign record = %v, want a *CorruptError", err)
	}
	if got, want := ce.Line, 5; got != want {
		t.Errorf("CorruptError.Line = %d, want %d", got, want)
	}
	if after := fileSum(t, path); after != before {
		t.Errorf("the writer changed a corrupt log")
	}
	if err2 := w.Append(stepStart("d")); err2 != err {
		t.Errorf("next Append = %v, want the same sticky error", err2)
	}
	w.Close()
}

func appendRaw(t testing.TB, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestDurabilityAlways(t *testing.T) {
	path := newLogPath(t)
	fs := &faultFS{}
	w := openLog(t, path, WriterOptions{FS: fs, Durability: Always})
	for i, r := range []*Record{taskStart(), stepStart("a"), stepStart("b"), stepStart("c")} {
		mustAppend(t, w, r)
		if got, want := w.Fsyncs(), int64(i+1); got != want {
			t.Errorf("after %d appends Fsyncs = %d, want %d", i+1, got, want)
		}
		if _, _, _, synced := fs.counts(); synced != w.Offset() {
			t.Errorf("Append returned with %d of %d bytes synced", synced, w.Offset())
		}
	}
	mustClose(t, w)
}

// TestAppendSyncing: the record's fsync starts without the caller waiting;
// the next durable append is on disk only with it; a failed background
// fsync fails that append, so nothing that depends on the record happens.
func TestAppendSyncing(t *testing.T) {
	path := newLogPath(t)
	release := make(chan struct{})
	fs := &faultFS{beforeSync: func(n int) {
		if n == 2 {
			<-release // hold the STEP_END's fsync
		}
	}}
	w := openLog(t, path, WriterOptions{FS: fs, Durability: Batch})
	if err := w.AppendDurable(taskStart()); err != nil {
		t.Fatal(err)
	}
	end := &Record{EventType: StepEnd, StepID: "a", Status: Success}
	if err := w.AppendSyncing(end); err != nil {
		t.Fatalf("AppendSyncing: %v", err)
	}
	// AppendSyncing returned while its fsync is held.
	if _, _, _, synced := fs.counts(); synced == w.Offset() {
		t.Errorf("AppendSyncing waited for its fsync")
	}
	done := make(chan error)
	go func() { done <- w.AppendDurable(stepStart("b")) }()
	select {
	case err := <-done:
		t.Fatalf("a durable append returned (%v) before the earlier fsync finished", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, _, _, synced := fs.counts(); synced != w.Offset() {
		t.Errorf("after the durable append %d of %d bytes are synced", synced, w.Offset())
	}
	mustClose(t, w)

	// A background fsync that fails stops the writer.
	path = newLogPath(t)
	fs = &faultFS{failSync: 2, errno: syscall.EIO}
	w = openLog(t, path, WriterOptions{FS: fs, Durability: Batch})
	if err := w.AppendDurable(taskStart()); err != nil {
		t.Fatal(err)
	}
	if err := w.AppendSyncing(end); err != nil {
		t.Fatalf("AppendSyncing: %v", err)
	}
	var we *WriteError
	if err := w.AppendDurable(stepStart("b")); !errors.As(err, &we) || !errors.Is(err, syscall.EIO) {
		t.Errorf("durable append after a failed background fsync = %v, want a WriteError wrapping EIO", err)
	}
	w.Close()
}

// TestAppendUnsynced: under durability always, AppendUnsynced neither
// starts nor waits for an fsync; SyncSoon starts one without waiting, and a
// later Sync finds everything durable.
func TestAppendUnsynced(t *testing.T) {
	path := newLogPath(t)
	release := make(chan struct{})
	fs := &faultFS{beforeSync: func(n int) {
		if n == 2 {
			<-release // hold SyncSoon's fsync
		}
	}}
	w := openLog(t, path, WriterOptions{FS: fs, Durability: Always})
	if err := w.AppendDurable(taskStart()); err != nil {
		t.Fatal(err)
	}
	before := w.Fsyncs()
	if err := w.AppendUnsynced(&Record{EventType: StepEnd, StepID: "a", Status: Success}); err != nil {
		t.Fatalf("AppendUnsynced: %v", err)
	}
	if w.Fsyncs() != before {
		t.Errorf("AppendUnsynced started an fsync")
	}
	if _, _, _, synced := fs.counts(); synced == w.Offset() {
		t.Errorf("the unsynced record is already synced")
	}
	w.SyncSoon() // returns while its fsync is held
	close(release)
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, syncs, _, synced := fs.counts(); synced != w.Offset() || syncs != 2 {
		t.Errorf("after SyncSoon and Sync: %d fsyncs, %d of %d bytes synced; want 2 fsyncs, all synced", syncs, synced, w.Offset())
	}
	mustClose(t, w)
}

func TestDurabilityBatch(t *testing.T) {
	path := newLogPath(t)
	fs := &faultFS{}
	w := openLog(t, path, WriterOptions{FS: fs, Durability: Batch})
	mustAppend(t, w, taskStart(), stepStart("a"), stepStart("b"))
	if got := w.Fsyncs(); got != 0 {
		t.Errorf("Batch: after 3 Appends Fsyncs = %d, want 0", got)
	}
	if _, _, _, synced := fs.counts(); synced != 0 {
		t.Errorf("Batch: Append synced %d bytes", synced)
	}
	if err := w.AppendDurable(stepStart("c")); err != nil {
		t.Fatal(err)
	}
	if got := w.Fsyncs(); got != 1 {
		t.Errorf("Batch: after AppendDurable Fsyncs = %d, want 1", got)
	}
	if _, _, _, synced := fs.counts(); synced != w.Offset() {
		t.Errorf("AppendDurable returned with %d of %d bytes synced", synced, w.Offset())
	}
	// Sync with nothing new to sync does not fsync again.
	if err := w.Sync(); err != nil || w.Fsyncs() != 1 {
		t.Errorf("Sync with nothing to sync: %v, Fsyncs %d; want nil, 1", err, w.Fsyncs())
	}
	mustAppend(t, w, stepStart("d"))
	mustClose(t, w) // Close makes it durable
	if _, _, _, synced := fs.counts(); synced != w.Offset() || w.Fsyncs() != 2 {
		t.Errorf("Close: %d of %d bytes synced, Fsyncs %d; want all, 2", synced, w.Offset(), w.Fsyncs())
	}
}

// heldWrites is the number of appends waiting for the running fsync.
func (w *Writer) heldWrites() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.held
}

// waitHeld waits until n appends are held back by the running fsync.
func waitHeld(t *testing.T, w *Writer, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for w.heldWrites() < n {
		if time.Now().After(deadline) {
			t.Errorf("%d appends are held back by the running fsync, want %d", w.heldWrites(), n)
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// TestGroupCommit holds an fsync until every appender it does not cover has
// arrived: none writes while it runs, and one fsync covers them all once it
// is done.
func TestGroupCommit(t *testing.T) {
	const appenders = 32
	path := newLogPath(t)
	fs := &faultFS{}
	w := openLog(t, path, WriterOptions{FS: fs, Durability: Always})
	if err := w.Append(taskStart()); err != nil { // write 1, sync 1
		t.Fatal(err)
	}
	var writesDuringSync int
	fs.beforeSync = func(n int) {
		if n == 2 {
			// The appenders that wrote before this fsync began (at least
			// one) are covered by it; every other one must be held.
			before, _, _, _ := fs.counts()
			waitHeld(t, w, appenders-(before-1))
			after, _, _, _ := fs.counts()
			writesDuringSync = after - before
		}
	}
	var wg sync.WaitGroup
	for i := range appenders {
		wg.Go(func() {
			if err := w.Append(stepStart(fmt.Sprint("s", i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	mustClose(t, w)
	readClean(t, path)
	if writesDuringSync != 0 {
		t.Errorf("%d records were written while an fsync ran, want none", writesDuringSync)
	}
	if got, want := w.Fsyncs(), int64(3); got != want {
		t.Errorf("%d concurrent appends took %d fsyncs in all, want %d (the held one and one for the rest)", appenders, got-1, want-1)
	}
}

// TestNoWriteAfterFailedFsync starts appends while an fsync that will fail
// runs (the interleaving behind a rare TestIOFaults failure): they must wait
// for its outcome and fail with its error, writing nothing; a record
// written after a failed fsync could reach the disk after the data it lost.
func TestNoWriteAfterFailedFsync(t *testing.T) {
	for _, durability := range []string{Always, Batch} {
		t.Run(durability, func(t *testing.T) {
			path := newLogPath(t)
			fs := &faultFS{failSync: 2, errno: syscall.EIO}
			w := openLog(t, path, WriterOptions{FS: fs, Durability: durability})
			if err := w.AppendDurable(taskStart()); err != nil { // write 1, sync 1
				t.Fatal(err)
			}
			const racers = 4
			results := make(chan error, racers)
			fs.beforeSync = func(n int) {
				if n != 2 {
					return
				}
				for i := range racers {
					go func() { results <- w.Append(stepStart(fmt.Sprint("racer", i))) }()
				}
				waitHeld(t, w, racers)
			}
			failed := w.AppendDurable(stepStart("a")) // write 2, sync 2 fails
			if !errors.Is(failed, syscall.EIO) {
				t.Fatalf("AppendDurable = %v, want EIO", failed)
			}
			for range racers {
				if err := <-results; err != failed {
					t.Errorf("append racing the failed fsync = %v, want the sticky error %v", err, failed)
				}
			}
			if _, _, after, _ := fs.counts(); len(after) != 0 {
				t.Errorf("calls on the log after the failed fsync: %v", after)
			}
			w.Close()
			if recs, _, err := ReadAll(path, ReadOptions{TaskID: testTask}); err != nil || len(recs) != 2 {
				t.Errorf("log reads back %d records (%v), want the 2 written before the fault", len(recs), err)
			}
		})
	}
}

func TestWriteFaults(t *testing.T) {
	eio, enospc := syscall.EIO, syscall.ENOSPC
	tests := []struct {
		name       string
		durability string
		fs         *faultFS
		durableAt  int // this append uses AppendDurable (1-based); 0: none
		failAt     int // the append that fails (1-based)
		wantLast   int64
		wantErr    error  // errors.Is target; nil: check wantMsg
		wantMsg    string // in the error
		wantRecs   int    // records that read back
		wantTorn   bool
	}{
		{name: "write fails", durability: Always, fs: &faultFS{failWrite: 3, errno: eio},
			failAt: 3, wantLast: 2, wantErr: eio, wantRecs: 2},
		{name: "short write, ENOSPC", durability: Always, fs: &faultFS{failWrite: 3, errno: enospc, short: true},
			failAt: 3, wantLast: 2, wantErr: enospc, wantRecs: 2, wantTorn: true},
		{name: "short write, no error", durability: Always, fs: &faultFS{failWrite: 4, short: true},
			failAt: 4, wantLast: 3, wantMsg: "short write", wantRecs: 3, wantTorn: true},
		{name: "fsync fails", durability: Always, fs: &faultFS{failSync: 3, errno: eio},
			failAt: 3, wantLast: 2, wantErr: eio, wantRecs: 3},
		{name: "batch: write fails before any fsync", durability: Batch, fs: &faultFS{failWrite: 2, errno: eio},
			failAt: 2, wantLast: 0, wantErr: eio, wantRecs: 1},
		{name: "batch: fsync of AppendDurable fails", durability: Batch, fs: &faultFS{failSync: 1, errno: eio},
			durableAt: 4, failAt: 4, wantLast: 0, wantErr: eio, wantRecs: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := newLogPath(t)
			w := openLog(t, path, WriterOptions{FS: tt.fs, Durability: tt.durability})
			var failed error
			for i := 1; i <= tt.failAt; i++ {
				r := stepStart(fmt.Sprint("s", i))
				if i == 1 {
					r = taskStart()
				}
				var err error
				if i == tt.durableAt {
					err = w.AppendDurable(r)
				} else {
					err = w.Append(r)
				}
				if i < tt.failAt && err != nil {
					t.Fatalf("append %d: %v", i, err)
				}
				failed = err
			}
			var we *WriteError
			if !errors.As(failed, &we) {
				t.Fatalf("append %d = %v, want a *WriteError", tt.failAt, failed)
			}
			if we.Path != path || we.LastSeq != tt.wantLast {
				t.Errorf("WriteError{Path: %q, LastSeq: %d}, want {%q, %d}", we.Path, we.LastSeq, path, tt.wantLast)
			}
			if tt.wantErr != nil && !errors.Is(failed, tt.wantErr) {
				t.Errorf("error %v is not %v", failed, tt.wantErr)
			}
			if msg := failed.Error(); !strings.Contains(msg, path) || !strings.Contains(msg, fmt.Sprintf("seq %d", tt.wantLast)) ||
				!strings.Contains(msg, tt.wantMsg) {
				t.Errorf("error %q does not name the log, seq %d and %q", msg, tt.wantLast, tt.wantMsg)
			}
			// Sticky: the same error, and no more I/O on the log.
			for _, next := range []func() error{
				func() error { return w.Append(stepStart("later")) },
				func() error { return w.AppendDurable(stepStart("later")) },
				w.Sync,
				w.Err,
			} {
				if err := next(); err != failed {
					t.Errorf("after the fault got %v, want the same sticky error", err)
				}
			}
			if err := w.Close(); err != failed {
				t.Errorf("Close = %v, want the sticky error", err)
			}
			if _, _, after, _ := tt.fs.counts(); len(after) != 0 {
				t.Errorf("calls on the log after the fault: %v", after)
			}

			recs, tail, err := ReadAll(path, ReadOptions{TaskID: testTask})
			if err != nil {
				t.Fatalf("the log does not read back: %v", err)
			}
			if len(recs) != tt.wantRecs || (tail.Torn > 0) != tt.wantTorn {
				t.Errorf("log reads back %d records, torn %d; want %d, torn %v", len(recs), tail.Torn, tt.wantRecs, tt.wantTorn)
			}
			// The next run repairs whatever the fault left and goes on.
			w2 := openLog(t, path, WriterOptions{})
			mustAppend(t, w2, stepStart("resumed"))
			mustClose(t, w2)
			recs = readClean(t, path)
			wantAfter := tt.wantRecs + 1
			if tt.wantTorn {
				wantAfter++ // the torn_tail WARNING
				if got := len(sideFiles(t, path)); got != 1 {
					t.Errorf("%d side files, want 1", got)
				}
			}
			if len(recs) != wantAfter {
				t.Errorf("after the repair the log holds %d records, want %d", len(recs), wantAfter)
			}
		})
	}
}

// TestShortWriteEFBIG lets the kernel cut a write: the child appends under
// `ulimit -f`, gets EFBIG in a WriteError (Go ignores SIGXFSZ), and the
// parent's Open repairs the torn tail it leaves.
func TestShortWriteEFBIG(t *testing.T) {
	if os.Getenv("EVENTLOG_CHILD") == "efbig" {
		efbigChild(t, os.Getenv("EVENTLOG_PATH"))
		return
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Fatalf("this test needs sh: %v", err)
	}
	path := newLogPath(t)
	cmd := exec.Command("sh", "-c", `ulimit -f 8 && exec "$0" -test.run='^TestShortWriteEFBIG$' -test.count=1 -test.v`, os.Args[0])
	cmd.Env = append(os.Environ(), "EVENTLOG_CHILD=efbig", "EVENTLOG_PATH="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child:\n%s", out)
	data := readFile(t, path)
	if len(data) == 0 || data[len(data)-1] == '\n' {
		t.Fatalf("the kernel did not cut a record: the %d-byte log ends %q", len(data), data[max(0, len(data)-10):])
	}
	recs, tail, err := ReadAll(path, ReadOptions{TaskID: testTask})
	if err != nil || tail.Torn == 0 {
		t.Fatalf("ReadAll = torn %d, %v; want a torn tail and no error", tail.Torn, err)
	}
	w := openLog(t, path, WriterOptions{})
	mustAppend(t, w, stepStart("after"))
	mustClose(t, w)
	after := readClean(t, path)
	if got, want := len(after), len(recs)+2; got != want {
		t.Errorf("after the repair the log holds %d records, want %d", got, want)
	}
	if got := readFile(t, fmt.Sprintf("%s.torn-%d", path, tail.End)); int64(len(got)) != tail.Torn {
		t.Errorf("side file holds %d bytes, want %d", len(got), tail.Torn)
	}
}

func efbigChild(t *testing.T, path string) {
	w := openLog(t, path, WriterOptions{Durability: Batch})
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		r := stepStart(fmt.Sprint("s", i))
		if i == 0 {
			r = taskStart()
		}
		r.Message = strings.Repeat("x", 50+i%13)
		err = w.Append(r)
	}
	var we *WriteError
	if !errors.As(err, &we) || !errors.Is(err, syscall.EFBIG) {
		t.Fatalf("appending under ulimit -f: %v, want a WriteError with EFBIG", err)
	}
	if err2 := w.Append(stepStart("again")); err2 != err {
		t.Errorf("next Append = %v, want the same sticky error", err2)
	}
	t.Logf("child: %v", err)
}
