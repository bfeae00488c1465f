package eventlog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

// writeHistory writes recs through a real writer and returns each record's
// end offset.
func writeHistory(t *testing.T, path string, recs []*Record) []int64 {
	t.Helper()
	var ends []int64
	w := openLog(t, path, WriterOptions{Durability: Batch, OnAppend: func(_ *Record, end int64) { ends = append(ends, end) }})
	for _, r := range recs {
		c := *r
		c.Seq, c.TaskID = 0, ""
		mustAppend(t, w, &c)
	}
	mustClose(t, w)
	return ends
}

// resume replays the log at logPath the way a resume does: from the
// snapshot at snapPath when it matches, else from the start.
func resume(t *testing.T, snapPath, logPath string) (*State, error) {
	t.Helper()
	st := NewState(testTask)
	var opts ReadOptions
	s, err := LoadSnapshot(snapPath, logPath, testTask)
	if err == nil {
		st, opts = s.State, ReadOptions{Offset: s.Offset, Seq: s.Seq}
	}
	opts.TaskID = testTask
	if _, rerr := Read(logPath, opts, func(r *Record) error { st.Apply(r); return nil }); rerr != nil {
		t.Fatalf("Read: %v", rerr)
	}
	return st, err
}

// TestSnapshotProperties: a snapshot taken after any record k, plus the
// records after it, replays to the state of the whole log.
func TestSnapshotProperties(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	histories := 60
	if testing.Short() {
		histories = 15
	}
	for h := range histories {
		recs := randomHistory(rng, 1+rng.IntN(150))
		dir := t.TempDir()
		logPath := filepath.Join(dir, "task_t1_1.jsonl")
		ends := writeHistory(t, logPath, recs)
		want := jsonState(t, Replay(testTask, recs))
		for _, k := range []int{1, 1 + rng.IntN(len(recs)), len(recs)} {
			s, err := NewSnapshot(logPath, ends[k-1], int64(k), Version, Replay(testTask, recs[:k]))
			if err != nil {
				t.Fatalf("seed %d history %d: NewSnapshot at %d: %v", seed, h, k, err)
			}
			snapPath := filepath.Join(dir, "state", "t1.snapshot.json")
			if err := WriteSnapshot(nil, snapPath, s); err != nil {
				t.Fatal(err)
			}
			got, err := resume(t, snapPath, logPath)
			if err != nil {
				t.Fatalf("seed %d history %d: LoadSnapshot at record %d: %v", seed, h, k, err)
			}
			if got := jsonState(t, got); !reflect.DeepEqual(got, want) {
				t.Fatalf("seed %d history %d: snapshot at record %d + tail =\n%+v\nwant %+v", seed, h, k, got, want)
			}
		}
	}
}

// TestSnapshotMismatch: a snapshot that does not match its log, in any way,
// is refused, and the full replay is still right.
func TestSnapshotMismatch(t *testing.T) {
	recs := logRecords(testTask, sampleRecords())
	want := jsonState(t, Replay(testTask, recs))
	cases := []struct {
		name   string
		damage func(t *testing.T, snapPath, logPath string, s *Snapshot)
		reason string
	}{
		{"flipped byte", func(t *testing.T, snapPath, _ string, _ *Snapshot) {
			data := readFile(t, snapPath)
			data[len(data)/2] ^= 1
			os.WriteFile(snapPath, data, 0o644)
		}, "checksum mismatch"},
		{"other version", func(t *testing.T, snapPath, _ string, s *Snapshot) {
			s.Version = SnapshotVersion + 1
			mustWriteSnapshot(t, snapPath, s)
		}, fmt.Sprintf("format v%d", SnapshotVersion+1)},
		{"other task", func(t *testing.T, snapPath, _ string, s *Snapshot) {
			s.TaskID = "t2"
			mustWriteSnapshot(t, snapPath, s)
		}, `task "t2"`},
		{"other log", func(t *testing.T, snapPath, _ string, s *Snapshot) {
			s.Log = "task_t1_2.jsonl"
			mustWriteSnapshot(t, snapPath, s)
		}, "covers log"},
		{"offset past the end", func(t *testing.T, snapPath, _ string, s *Snapshot) {
			s.Offset = 1 << 30
			mustWriteSnapshot(t, snapPath, s)
		}, "past the log's end"},
		{"offset mid-line", func(t *testing.T, snapPath, _ string, s *Snapshot) {
			s.Offset -= 3
			mustWriteSnapshot(t, snapPath, s)
		}, "no line ends"},
		{"other seq", func(t *testing.T, snapPath, _ string, s *Snapshot) {
			s.Seq--
			s.State.LastSeq--
			mustWriteSnapshot(t, snapPath, s)
		}, "seq"},
		{"other record crc", func(t *testing.T, snapPath, _ string, s *Snapshot) {
			s.RecordCRC = "00000000"
			mustWriteSnapshot(t, snapPath, s)
		}, "crc"},
		{"other nonce", func(t *testing.T, snapPath, _ string, s *Snapshot) {
			s.RunNonce = "ffff"
			mustWriteSnapshot(t, snapPath, s)
		}, "run_nonce"},
		{"newer log format", func(t *testing.T, snapPath, _ string, s *Snapshot) {
			s.LogVersion = Version + 1
			mustWriteSnapshot(t, snapPath, s)
		}, "newer"},
		{"log replaced", func(t *testing.T, _, logPath string, _ *Snapshot) {
			os.Remove(logPath)
			again := logRecords(testTask, sampleRecords())
			again[0].Start.RunNonce = "another"
			os.WriteFile(logPath, bytes.Join(encodeLines(t, again), nil), 0o644)
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			logPath, snapPath, s, _ := snapshotted(t, recs)
			c.damage(t, snapPath, logPath, s)
			got, err := resume(t, snapPath, logPath)
			if err == nil || !strings.Contains(err.Error(), c.reason) {
				t.Errorf("LoadSnapshot = %v, want an error containing %q", err, c.reason)
			}
			if c.name != "log replaced" && !reflect.DeepEqual(jsonState(t, got), want) {
				t.Errorf("state after the full replay differs from the log's")
			}
		})
	}
	if _, err := LoadSnapshot(filepath.Join(t.TempDir(), "none.json"), "x", testTask); !errors.Is(err, ErrNoSnapshot) {
		t.Errorf("LoadSnapshot(missing) = %v, want ErrNoSnapshot", err)
	}
}

// snapshotted writes recs as a log in a fresh folder and a snapshot of all
// but its last three records; it returns their paths, the snapshot and
// where each record ends.
func snapshotted(t *testing.T, recs []*Record) (logPath, snapPath string, s *Snapshot, ends []int64) {
	t.Helper()
	dir := t.TempDir()
	logPath, snapPath = filepath.Join(dir, "task_t1_1.jsonl"), filepath.Join(dir, "t1.snapshot.json")
	ends = writeHistory(t, logPath, recs)
	k := len(recs) - 3
	s, err := NewSnapshot(logPath, ends[k-1], int64(k), Version, Replay(testTask, recs[:k]))
	if err != nil {
		t.Fatal(err)
	}
	mustWriteSnapshot(t, snapPath, s)
	return logPath, snapPath, s, ends
}

// TestSnapshotPrefixDamagedInPlace: a byte of the prefix changed in place
// (the same file, the same length, its first and last record intact) makes
// the snapshot unusable, so that the full replay finds the damage and the
// log is not appended to.
func TestSnapshotPrefixDamagedInPlace(t *testing.T) {
	logPath, snapPath, _, ends := snapshotted(t, logRecords(testTask, sampleRecords()))
	if _, err := LoadSnapshot(snapPath, logPath, testTask); err != nil {
		t.Fatalf("the intact log: %v", err)
	}
	f, err := os.OpenFile(logPath, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The timestamp's first digit on line 2: "seq":2,"timestamp":"2...
	at := ends[0] + int64(len(`{"seq":2,"timestamp":"`))
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, at); err != nil || b[0] < '0' || b[0] > '8' {
		t.Fatalf("byte at %d is %q (%v), not a digit to change", at, b, err)
	}
	b[0]++
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = LoadSnapshot(snapPath, logPath, testTask)
	if err == nil || !strings.Contains(err.Error(), "line 2 of the prefix: checksum mismatch") {
		t.Errorf("LoadSnapshot over a prefix damaged in place = %v, want line 2's checksum mismatch", err)
	}
	if _, rerr := Read(logPath, ReadOptions{TaskID: testTask}, func(*Record) error { return nil }); rerr == nil {
		t.Error("the full read did not find the damage either")
	}
}

// TestSnapshotEncode: the streamed snapshot is, byte for byte, json.Marshal
// of it with its checksum, whatever the state holds (empty, nil lists and
// maps, every kind of record, HTML-escaped text).
func TestSnapshotEncode(t *testing.T) {
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 2))
	states := map[string]*State{
		"empty":       NewState(testTask),
		"nil maps":    {TaskID: testTask},
		"sample":      Replay(testTask, logRecords(testTask, sampleRecords())),
		"start steps": {TaskID: testTask, Start: &StartInfo{RunNonce: "<&>"}, Order: []string{}},
	}
	for i := range 20 {
		states[fmt.Sprint("random ", i)] = Replay(testTask, randomHistory(rng, 1+rng.IntN(200)))
	}
	for name, st := range states {
		s := &Snapshot{Version: SnapshotVersion, TaskID: testTask, Log: "task_t1_1.jsonl", RunNonce: "n",
			FileID: "1:2", Offset: 10, Seq: st.LastSeq, RecordCRC: "00000000", LogVersion: Version, State: st}
		body, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Appendf(body[:len(body)-1:len(body)-1], `,"crc":"%08x"}`+"\n", crc32.Checksum(body, castagnoli))
		var got bytes.Buffer
		if err := s.encode(&got); err != nil {
			t.Fatalf("seed %d %s: encode: %v", seed, name, err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("seed %d %s: encode =\n%s\nwant json.Marshal's\n%s", seed, name, got.Bytes(), want)
		}
		if _, err := decodeSnapshot(got.Bytes()); err != nil {
			t.Errorf("seed %d %s: decodeSnapshot(encode) = %v", seed, name, err)
		}
	}
}

func mustWriteSnapshot(t *testing.T, path string, s *Snapshot) {
	t.Helper()
	if err := WriteSnapshot(nil, path, s); err != nil {
		t.Fatal(err)
	}
}

// renameFailFS fails every Rename.
type renameFailFS struct{ OS }

func (renameFailFS) Rename(string, string) error { return errors.New("injected rename failure") }

// TestWriteSnapshotFailure: a failed write leaves the previous snapshot.
func TestWriteSnapshotFailure(t *testing.T) {
	dir := t.TempDir()
	logPath := filepath.Join(dir, "task_t1_1.jsonl")
	recs := logRecords(testTask, sampleRecords())
	ends := writeHistory(t, logPath, recs)
	snapPath := filepath.Join(dir, "t1.snapshot.json")
	old, err := NewSnapshot(logPath, ends[1], 2, Version, Replay(testTask, recs[:2]))
	if err != nil {
		t.Fatal(err)
	}
	mustWriteSnapshot(t, snapPath, old)
	next, err := NewSnapshot(logPath, ends[len(ends)-1], int64(len(recs)), Version, Replay(testTask, recs))
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteSnapshot(renameFailFS{}, snapPath, next); err == nil {
		t.Fatal("WriteSnapshot with a failing rename = nil, want an error")
	}
	got, err := LoadSnapshot(snapPath, logPath, testTask)
	if err != nil || got.Seq != 2 {
		t.Fatalf("LoadSnapshot after a failed write = seq %v, %v; want the old snapshot (seq 2)", got, err)
	}
}

// BenchmarkReplay1M reads and replays a log of 1,000,000 records, as a
// resume without a snapshot does, and in the same iteration reads the same
// file line by line without decoding it (the baseline: a raw bufio line
// scan). ratio is replay / read, in elapsed time. A big log is decoded on
// every core while it is read, so the replay's CPU time (cpu-s/replay, the
// process's user and system time, its GC's included) is reported too: on a
// machine whose cores are busy with other work, elapsed time is about that.
//
//	go test -run '^$' -bench BenchmarkReplay1M -benchtime 1x ./eventlog/
func BenchmarkReplay1M(b *testing.B) {
	path, n := buildReplayLog(b, 1_000_000)
	var replay, read, replayCPU, readCPU time.Duration
	for b.Loop() {
		began, cpu := time.Now(), cpuTime()
		s := NewState(testTask)
		tail, err := Read(path, ReadOptions{TaskID: testTask}, func(r *Record) error { s.Apply(r); return nil })
		if err != nil || tail.Lines != n {
			b.Fatalf("Read = %v, %d lines", err, tail.Lines)
		}
		replay += time.Since(began)
		replayCPU += cpuTime() - cpu
		began, cpu = time.Now(), cpuTime()
		lines := readLines(b, path)
		read += time.Since(began)
		readCPU += cpuTime() - cpu
		if lines != n {
			b.Fatalf("%d lines, want %d", lines, n)
		}
	}
	b.ReportMetric(replay.Seconds()/float64(b.N), "s/replay")
	b.ReportMetric(read.Seconds()/float64(b.N), "s/read")
	b.ReportMetric(replayCPU.Seconds()/float64(b.N), "cpu-s/replay")
	b.ReportMetric(readCPU.Seconds()/float64(b.N), "cpu-s/read")
	b.ReportMetric(float64(replay.Nanoseconds())/float64(b.N*n), "ns/record")
	b.ReportMetric(float64(replay)/float64(read), "ratio")
}

// cpuTime is the user and system time the process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func readLines(b *testing.B, path string) int {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 256<<10)
	n := 0
	for {
		_, err := br.ReadSlice('\n')
		if err == io.EOF {
			return n
		}
		if err != nil && err != bufio.ErrBufferFull {
			b.Fatal(err)
		}
		n++
	}
}

// BenchmarkResumeSnapshot opens a writer on a log of 1,000,000 records the
// way a resume does: with a snapshot that covers all but the last 1,000
// records (load, verify, read the tail), and, in the same iteration, with
// no snapshot (read everything). ratio is with / without.
func BenchmarkResumeSnapshot(b *testing.B) {
	const tailRecords = 1000
	path, n := buildReplayLog(b, 1_000_000)
	k := int64(n - tailRecords)
	errStop := errors.New("stop")
	st := NewState(testTask)
	tail, err := Read(path, ReadOptions{TaskID: testTask}, func(r *Record) error {
		st.Apply(r)
		if r.Seq == k {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) {
		b.Fatal(err)
	}
	snap, err := NewSnapshot(path, tail.End, k, Version, st)
	if err != nil {
		b.Fatal(err)
	}
	snapPath := filepath.Join(b.TempDir(), "t1.snapshot.json")
	if err := WriteSnapshot(nil, snapPath, snap); err != nil {
		b.Fatal(err)
	}
	open := func(after Prefix, st *State) *State {
		w, err := Open(path, WriterOptions{TaskID: testTask, After: after}, func(r *Record) error { st.Apply(r); return nil })
		if err != nil {
			b.Fatal(err)
		}
		w.Close()
		return st
	}
	var with, without time.Duration
	for b.Loop() {
		began := time.Now()
		s, err := LoadSnapshot(snapPath, path, testTask)
		if err != nil {
			b.Fatal(err)
		}
		got := open(Prefix{Offset: s.Offset, Seq: s.Seq, Version: s.LogVersion}, s.State)
		with += time.Since(began)
		began = time.Now()
		full := open(Prefix{}, NewState(testTask))
		without += time.Since(began)
		if got.LastSeq != int64(n) || full.LastSeq != int64(n) {
			b.Fatalf("resumed to seq %d and %d, want %d", got.LastSeq, full.LastSeq, n)
		}
	}
	fi, _ := os.Stat(snapPath)
	b.ReportMetric(float64(with.Microseconds())/1000/float64(b.N), "ms/resume")
	b.ReportMetric(float64(without.Microseconds())/1000/float64(b.N), "full-ms/resume")
	b.ReportMetric(float64(with)/float64(without), "ratio")
	b.ReportMetric(float64(fi.Size())/1024, "snapshot-KiB")
}

// BenchmarkVerifyPrefix times what a resume from a snapshot spends checking
// the checksum of every line of a prefix of verifiedPrefixMax bytes, the
// largest it checks, against reading the same lines alone (bufio).
func BenchmarkVerifyPrefix(b *testing.B) {
	path, _ := buildReplayLog(b, 100_000)
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var offset, seq int64
	br := bufio.NewReaderSize(f, 4<<20)
	for offset < verifiedPrefixMax {
		line, err := br.ReadSlice('\n')
		if err != nil {
			b.Fatalf("the log is shorter than %d bytes: %v", verifiedPrefixMax, err)
		}
		if offset+int64(len(line)) > verifiedPrefixMax {
			break
		}
		offset += int64(len(line))
		seq++
	}
	var verify, read time.Duration
	for b.Loop() {
		began := time.Now()
		if err := verifyPrefix(f, offset, seq); err != nil {
			b.Fatal(err)
		}
		verify += time.Since(began)
		began = time.Now()
		lines := bufio.NewScanner(io.NewSectionReader(f, 0, offset))
		lines.Buffer(make([]byte, 256<<10), MaxLineBytes)
		for lines.Scan() {
		}
		if err := lines.Err(); err != nil {
			b.Fatal(err)
		}
		read += time.Since(began)
	}
	b.ReportMetric(float64(verify.Microseconds())/float64(b.N)/1000, "verify-ms")
	b.ReportMetric(float64(read.Microseconds())/float64(b.N)/1000, "read-ms")
	b.ReportMetric(float64(verify)/float64(read), "verify/read")
	b.ReportMetric(float64(offset)/(1<<20), "MiB")
}
