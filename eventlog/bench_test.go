package eventlog

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// benchRecord is a typical STEP_END: digests, an error, an exit code.
func benchRecord(i int) *Record {
	return &Record{EventType: StepEnd, StepID: fmt.Sprintf("step-%03d", i%1000), Status: Running,
		RetryCount: i % 3, InputDigest: digest("in"), OutputDigest: digest("out"),
		ErrorMessage: "exit status 1: curl: (7) Failed to connect", DurationMS: 1234, ExitCode: intp(1),
		NextDelayMS: 2000}
}

// BenchmarkAppend appends one record per iteration; compare records/s with
// BenchmarkWriteFsync, a bare write+fdatasync of a line of the same size.
// The -locked cases check a task lock before every append, as the runner's
// writer does (one lstat): compare them with the same case without.
func BenchmarkAppend(b *testing.B) {
	cases := []struct {
		name       string
		durability string
		durable    bool // AppendDurable instead of Append
		parallel   bool
		locked     bool // the writer checks a task lock
	}{
		{name: "always", durability: Always},
		{name: "batch", durability: Batch},
		{name: "batch-durable", durability: Batch, durable: true},
		{name: "always-parallel", durability: Always, parallel: true}, // group commit
		{name: "always-locked", durability: Always, locked: true},
		{name: "batch-locked", durability: Batch, locked: true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			dir := b.TempDir()
			opts := WriterOptions{TaskID: testTask, Durability: c.durability}
			if c.locked {
				l, err := LockTask(filepath.Join(dir, "task_t1.lock"))
				if err != nil {
					b.Fatal(err)
				}
				defer l.Unlock()
				opts.Lock = l
			}
			w, err := Open(filepath.Join(dir, "bench.jsonl"), opts, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := w.AppendDurable(taskStart()); err != nil {
				b.Fatal(err)
			}
			fsyncs, records := w.Fsyncs(), w.Records()
			appendOne := w.Append
			if c.durable {
				appendOne = w.AppendDurable
			}
			cpu := cpuTime()
			if c.parallel {
				b.SetParallelism(16)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for i := 0; pb.Next(); i++ {
						if err := appendOne(benchRecord(i)); err != nil {
							b.Error(err)
							return
						}
					}
				})
				b.StopTimer()
			} else {
				for i := 0; b.Loop(); i++ {
					if err := appendOne(benchRecord(i)); err != nil {
						b.Fatal(err)
					}
				}
			}
			n := float64(w.Records() - records)
			b.ReportMetric(n/b.Elapsed().Seconds(), "records/s")
			b.ReportMetric(float64(w.Fsyncs()-fsyncs)/n, "fsyncs/record")
			// CPU time is what the writer costs apart from waiting for the
			// disk, and on a busy machine a steadier figure than ns/op.
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/n, "cpu-ns/record")
			if err := w.Close(); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// BenchmarkWriteFsync is the floor for durable appends: one O_APPEND write
// and one datasync (fdatasync on Linux) per line, no encoding, no lock.
func BenchmarkWriteFsync(b *testing.B) {
	r := benchRecord(1)
	r.Seq, r.TaskID, r.Timestamp = 1, testTask, ts(0)
	line, err := Encode(r)
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for b.Loop() {
		if _, err := f.Write(line); err != nil {
			b.Fatal(err)
		}
		if err := datasync(f); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(len(line)), "bytes/record")
}

// buildReplayLog writes a log of about n records: invocations of a
// 1000-step task, each step started and ended, one in ten retried once, a
// few markers and cleanups, and a summary.
func buildReplayLog(b *testing.B, n int) (path string, records int) {
	b.Helper()
	const steps = 1000
	path = filepath.Join(b.TempDir(), "replay.jsonl")
	w, err := Open(path, WriterOptions{TaskID: testTask, Durability: Batch, Now: fixedNow}, nil)
	if err != nil {
		b.Fatal(err)
	}
	start := &StartInfo{Version: Version, TaskName: "big", PipelineDigest: digest("p")}
	for i := range steps {
		start.Steps = append(start.Steps, StepInfo{ID: fmt.Sprintf("step-%03d", i), DependsOn: []string{},
			DefinitionDigest: digest(fmt.Sprint(i))})
	}
	appendRec := func(r *Record) {
		if err := w.Append(r); err != nil {
			b.Fatal(err)
		}
	}
	for inv := 0; w.Records() < int64(n); inv++ {
		appendRec(&Record{EventType: TaskStart, Status: Running, Start: start})
		for i := 0; i < steps && w.Records() < int64(n)-1; i++ {
			id := fmt.Sprintf("step-%03d", i)
			retry := 0
			if i%10 == inv%10 {
				appendRec(&Record{EventType: StepStart, StepID: id, Status: Running, InputDigest: digest(id), PGID: 1000 + i})
				appendRec(&Record{EventType: StepEnd, StepID: id, Status: Running, ErrorMessage: "exit status 1",
					DurationMS: 40, NextDelayMS: 1000, ExitCode: intp(1)})
				retry = 1
			}
			if i%97 == 0 {
				appendRec(&Record{EventType: Cleanup, StepID: id, Status: Pending, Dirty: inv%2 == 0})
				appendRec(&Record{EventType: Marker, StepID: id, Marker: &MarkerInfo{Name: id + "-upload", State: MarkerDone}})
			}
			appendRec(&Record{EventType: StepStart, StepID: id, Status: Running, RetryCount: retry, InputDigest: digest(id), PGID: 2000 + i})
			appendRec(&Record{EventType: StepEnd, StepID: id, Status: Success, RetryCount: retry, DurationMS: 52,
				InputDigest: digest(id), OutputDigest: digest("out" + id), Output: []byte(`{"rows":42}`)})
		}
		appendRec(&Record{EventType: TaskSummary, Status: Success, Summary: &SummaryInfo{Counts: map[string]int{Success: steps}}})
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	return path, int(w.Records())
}

// BenchmarkReplay100k reads and replays a log of 100,000 records,
// streaming, as a resume does. One op is one record: each pass replays the
// log from its start into a new State, and passes repeat until b.N records
// are done, so -benchtime=2000x covers about one invocation's worth of the
// mix and the default benchtime whole logs.
func BenchmarkReplay100k(b *testing.B) {
	path, perLog := buildReplayLog(b, 100_000)
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(fi.Size() / int64(perLog)) // the average record
	errDone := errors.New("done")
	for done := false; !done; {
		s := NewState(testTask)
		tail, err := Read(path, ReadOptions{TaskID: testTask}, func(r *Record) error {
			if !b.Loop() {
				done = true
				return errDone
			}
			s.Apply(r)
			return nil
		})
		switch {
		case errors.Is(err, errDone):
		case err != nil || tail.Torn != 0 || tail.Lines != perLog || !s.Complete():
			b.Fatalf("Read = %v: %d records, torn %d, complete %v", err, tail.Lines, tail.Torn, s.Complete())
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*float64(perLog)*1000, "ms/log")
}

// BenchmarkDecode decodes one line of each kind a replay meets with Decode
// and, in the same iteration, with decodeJSON: the checksum check and
// json.Unmarshal that Decode was before it had a parser of its own. ratio
// is Decode / decodeJSON.
func BenchmarkDecode(b *testing.B) {
	start := &StartInfo{Version: Version, TaskName: "big", PipelineDigest: digest("p")}
	for i := range 1000 {
		start.Steps = append(start.Steps, StepInfo{ID: fmt.Sprintf("step-%03d", i), DependsOn: []string{},
			DefinitionDigest: digest(fmt.Sprint(i))})
	}
	kinds := []struct {
		name string
		rec  *Record
	}{
		{"step-start", &Record{EventType: StepStart, StepID: "step-042", Status: Running, InputDigest: digest("x"), PGID: 2042}},
		{"step-end", &Record{EventType: StepEnd, StepID: "step-042", Status: Success, DurationMS: 52, InputDigest: digest("x"),
			OutputDigest: digest("out"), Output: []byte(`{"rows":42}`)}},
		{"step-retry", benchRecord(7)},
		{"marker", &Record{EventType: Marker, StepID: "s", Marker: &MarkerInfo{Name: "s-upload", State: MarkerDone}}},
		{"task-summary", &Record{EventType: TaskSummary, Status: Success, Summary: &SummaryInfo{Counts: map[string]int{Success: 1000}}}},
		{"task-start-1000", &Record{EventType: TaskStart, Status: Running, Start: start}},
	}
	for _, k := range kinds {
		k.rec.Seq, k.rec.TaskID, k.rec.Timestamp = 12345, testTask, ts(7)
		line, err := Encode(k.rec)
		if err != nil {
			b.Fatal(err)
		}
		line = line[:len(line)-1]
		b.Run(k.name, func(b *testing.B) {
			b.SetBytes(int64(len(line)))
			var fast, std time.Duration
			for b.Loop() {
				began := time.Now()
				if _, err := Decode(line); err != nil {
					b.Fatal(err)
				}
				fast += time.Since(began)
				began = time.Now()
				if _, err := decodeJSON(line); err != nil {
					b.Fatal(err)
				}
				std += time.Since(began)
			}
			b.ReportMetric(float64(fast.Nanoseconds())/float64(b.N), "ns/decode")
			b.ReportMetric(float64(std.Nanoseconds())/float64(b.N), "json-ns/decode")
			b.ReportMetric(float64(fast)/float64(std), "ratio")
		})
	}
}

// BenchmarkLockCheck is what the runner's writer adds to every append: one
// TaskLock.Check (an lstat). Compare it with BenchmarkAppend/batch, an
// append without an fsync.
func BenchmarkLockCheck(b *testing.B) {
	l, err := LockTask(filepath.Join(b.TempDir(), "task_t1.lock"))
	if err != nil {
		b.Fatal(err)
	}
	defer l.Unlock()
	cpu := cpuTime()
	for b.Loop() {
		if err := l.Check(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
