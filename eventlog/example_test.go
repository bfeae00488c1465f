package eventlog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"apollo/eventlog"
)

// clock is a fixed time, so that the lines the examples print are the same
// on every run.
func clock() time.Time { return time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC) }

// writeLog writes a task's log at dir/task_demo.jsonl, as ExampleWriter
// shows, and returns its path: a TASK_START, then one step's start and end.
func writeLog(dir string) string {
	path := filepath.Join(dir, "task_demo.jsonl")
	w, err := eventlog.Open(path, eventlog.WriterOptions{
		TaskID: "demo",
		Now:    clock,
		First: &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running,
			Start: &eventlog.StartInfo{Version: eventlog.Version, TaskName: "demo"}},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range []*eventlog.Record{
		{EventType: eventlog.StepStart, StepID: "fetch", Status: eventlog.Running},
		{EventType: eventlog.StepEnd, StepID: "fetch", Status: eventlog.Success, Output: json.RawMessage(`{"rows":"3"}`)},
	} {
		if err := w.Append(r); err != nil {
			log.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}
	return path
}

// A Writer appends a task's records to its log. Open creates the log with
// its first record, the TASK_START, durable before Open returns; Append
// gives each record its seq, the task id and a timestamp, and returns once
// the record is on disk. Each line ends with the CRC-32C of the rest.
func ExampleWriter() {
	dir, err := os.MkdirTemp("", "eventlog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	w, err := eventlog.Open(filepath.Join(dir, "task_demo.jsonl"), eventlog.WriterOptions{
		TaskID: "demo",
		Now:    clock, // nil: time.Now
		First: &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running,
			Start: &eventlog.StartInfo{Version: eventlog.Version, TaskName: "demo"}},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	err = w.Append(&eventlog.Record{EventType: eventlog.StepStart, StepID: "fetch", Status: eventlog.Running})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Close(); err != nil {
		log.Fatal(err)
	}

	data, err := os.ReadFile(w.Path())
	if err != nil {
		log.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	fmt.Printf("%d records, the last:\n%s", w.LastSeq(), lines[1])
	// Output:
	// 2 records, the last:
	// {"seq":2,"timestamp":"2026-03-01T09:30:00Z","task_id":"demo","step_id":"fetch","event_type":"STEP_START","status":"RUNNING","retry_count":0,"input_digest":"","output_digest":"","error_message":"","duration_ms":0,"crc":"4039f8d7"}
}

// Open on a log that exists reads it first, under the log's lock, handing
// each record to visit, so a runner that resumes a task replays its state
// and appends after the last record.
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "eventlog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := writeLog(dir)

	st := eventlog.NewState("demo")
	w, err := eventlog.Open(path, eventlog.WriterOptions{TaskID: "demo", Now: clock}, func(r *eventlog.Record) error {
		st.Apply(r)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	defer w.Close()
	fmt.Println("fetch:", st.Step("fetch").Status, "after seq", w.LastSeq())
	// Output:
	// fetch: SUCCESS after seq 3
}

// Read hands each good record of a log to visit, in order. It never writes:
// a torn tail (the end of a line a crash cut short) is reported in the
// Tail, for the next writer to repair.
func ExampleRead() {
	dir, err := os.MkdirTemp("", "eventlog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := writeLog(dir)

	tail, err := eventlog.Read(path, eventlog.ReadOptions{TaskID: "demo"}, func(r *eventlog.Record) error {
		fields := []string{strconv.FormatInt(r.Seq, 10), r.EventType, r.StepID, r.Status, string(r.Output)}
		fmt.Println(strings.Join(slices.DeleteFunc(fields, func(f string) bool { return f == "" }), " "))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("lines:", tail.Lines, "torn bytes:", tail.Torn)
	// Output:
	// 1 TASK_START RUNNING
	// 2 STEP_START fetch RUNNING
	// 3 STEP_END fetch SUCCESS {"rows":"3"}
	// lines: 3 torn bytes: 0
}

// A crash mid-write can leave only a torn tail; ReadAll returns the records
// before it and says how many bytes it holds. Damage that a crash cannot
// make, a bad line followed by a good one, is a *CorruptError that names
// the line.
func ExampleReadAll() {
	dir, err := os.MkdirTemp("", "eventlog-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := writeLog(dir)
	data, err := os.ReadFile(path)
	if err != nil {
		log.Fatal(err)
	}

	// A torn tail: half a line at the end.
	torn := append(bytes.Clone(data), `{"seq":4,"timest`...)
	if err := os.WriteFile(path, torn, 0o644); err != nil {
		log.Fatal(err)
	}
	recs, tail, err := eventlog.ReadAll(path, eventlog.ReadOptions{})
	fmt.Println(len(recs), "records, torn bytes:", tail.Torn, "error:", err)

	// Corruption: the second line damaged, the third good.
	damaged := bytes.Replace(data, []byte(`"fetch","event_type":"STEP_START"`), []byte(`"fetch","event_type":"STEP_STARX"`), 1)
	if err := os.WriteFile(path, damaged, 0o644); err != nil {
		log.Fatal(err)
	}
	_, _, err = eventlog.ReadAll(path, eventlog.ReadOptions{})
	var ce *eventlog.CorruptError
	if errors.As(err, &ce) {
		fmt.Printf("corrupt at line %d: %v\n", ce.Line, ce.Err)
	}
	// Output:
	// 3 records, torn bytes: 16 error: <nil>
	// corrupt at line 2: checksum mismatch (line says 4039f8d7, content gives a9376488): the line was damaged or edited
}
