package eventlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Shared fixtures: realistic records, logs built in code, and file helpers.

const testTask = "t1"

// t0 is the fixed clock of every fixture.
var t0 = time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)

func ts(sec int) string { return FormatTime(t0.Add(time.Duration(sec) * time.Second)) }

func fixedNow() time.Time { return t0 }

func intp(n int) *int { return &n }

func digest(s string) string {
	return fmt.Sprintf("sha256:%x", sha256.Sum256([]byte(s)))
}

// startInfo is a TASK_START body of format version v.
func startInfo(v int) *StartInfo {
	return &StartInfo{
		Version:        v,
		TaskName:       "nightly",
		Pipeline:       "pipeline.yaml",
		PipelineDigest: digest("pipeline"),
		Steps: []StepInfo{
			{ID: "fetch", DependsOn: []string{}, DefinitionDigest: digest("fetch")},
			{ID: "load", DependsOn: []string{"fetch"}, DefinitionDigest: digest("load"), HasCleanup: true},
			{ID: "report", DependsOn: []string{"load"}, Optional: true, DefinitionDigest: digest("report")},
		},
		Vars:        map[string]string{"date": "2025-01-02", "region": "eu"},
		PID:         4242,
		Host:        "build-1",
		RunNonce:    "0123456789abcdef",
		Invocation:  1,
		Durability:  Always,
		Parallelism: 4,
	}
}

// sampleRecords is one record of every kind, as the engine writes them,
// without seq, task id or timestamp (the writer assigns those).
func sampleRecords() []*Record {
	return []*Record{
		{EventType: TaskStart, Status: Running, Start: startInfo(Version)},
		{EventType: StepStart, StepID: "fetch", Status: Running, InputDigest: digest("in-fetch"), PGID: 31337},
		{EventType: StepEnd, StepID: "fetch", Status: Running, ErrorMessage: "curl: (7) connection refused\n<html>&amp;",
			DurationMS: 1200, ExitCode: intp(7), NextDelayMS: 2000, InputDigest: digest("in-fetch")},
		{EventType: StepStart, StepID: "fetch", Status: Running, RetryCount: 1, InputDigest: digest("in-fetch"), PGID: 31340},
		{EventType: StepEnd, StepID: "fetch", Status: Success, RetryCount: 1, InputDigest: digest("in-fetch"),
			OutputDigest: digest("out-fetch"), DurationMS: 830, Output: json.RawMessage(`{"rows":12,"file":"a b.csv"}`)},
		{EventType: StepStart, StepID: "load", Status: Running, InputDigest: digest("in-load"), PGID: 31341},
		{EventType: Cleanup, StepID: "load", Status: Pending, Dirty: true, ExitCode: intp(0),
			Message: "cleanup of an attempt cut off by a crash", DurationMS: 15},
		{EventType: Marker, StepID: "load", Status: Running,
			Marker: &MarkerInfo{Name: "upload-2025-01-02", State: MarkerDone, Result: json.RawMessage(`"etag-77"`)}},
		{EventType: Warning, Message: "step load reset by apollo script",
			Intervention: &Intervention{Action: ActionReset, Steps: []string{"load"}, Why: "bad data", By: "apollo script"}},
		{EventType: StepEnd, StepID: "report", Status: Skipped, Interrupted: true, TimedOut: true},
		{EventType: TaskSummary, Status: Failed, DurationMS: 5120, Summary: &SummaryInfo{
			Counts: map[string]int{Success: 1, Failed: 1, Skipped: 1}, Failed: []string{"load"},
			FailedOptional: []string{"report"}, Blocked: []string{"x"}, Interrupted: true}},
	}
}

// logRecords gives recs seq 1..n, the task id and increasing timestamps, as
// a writer would.
func logRecords(task string, recs []*Record) []*Record {
	for i, r := range recs {
		r.Seq = int64(i + 1)
		r.TaskID = task
		if r.Timestamp == "" {
			r.Timestamp = ts(i)
		}
	}
	return recs
}

// encodeLines encodes each record to its line, newline included.
func encodeLines(t testing.TB, recs []*Record) [][]byte {
	t.Helper()
	lines := make([][]byte, len(recs))
	for i, r := range recs {
		line, err := Encode(r)
		if err != nil {
			t.Fatalf("Encode(%s seq %d): %v", r.EventType, r.Seq, err)
		}
		lines[i] = line
	}
	return lines
}

// sampleLog is the bytes of a good log of sampleRecords and its lines.
func sampleLog(t testing.TB) ([]byte, [][]byte) {
	t.Helper()
	lines := encodeLines(t, logRecords(testTask, sampleRecords()))
	return bytes.Join(lines, nil), lines
}

// withCRC turns a JSON object {...} into a log line with its checksum, the
// way a future writer would: used for hand-made lines (unknown fields).
func withCRC(body string) []byte {
	sum := crc32.Checksum([]byte(body), crc32.MakeTable(crc32.Castagnoli))
	return fmt.Appendf(nil, `%s,"crc":"%08x"}`+"\n", body[:len(body)-1], sum)
}

func writeLog(t testing.TB, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "task_t1_1735787045.jsonl")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func fileSum(t testing.TB, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sideFiles(t testing.TB, path string) []string {
	t.Helper()
	m, err := filepath.Glob(path + ".torn-*")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// seqs lists the records' seq numbers.
func seqs(recs []*Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Seq
	}
	return out
}

func oneToN(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = int64(i + 1)
	}
	return out
}

// plantTarget writes a file that a link planted in the state folder points
// to, and returns a check that it is untouched.
func plantTarget(t *testing.T, content []byte) (path string, untouched func()) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "precious")
	if err := os.WriteFile(path, content, 0o644); err != nil {
		t.Fatal(err)
	}
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, func() {
		t.Helper()
		after, err := os.Stat(path)
		if err != nil {
			t.Fatalf("the link's target: %v", err)
		}
		if got := readFile(t, path); !bytes.Equal(got, content) || !after.ModTime().Equal(before.ModTime()) {
			t.Errorf("the link's target was written: it holds %q", got)
		}
	}
}

func mustRemove(t *testing.T, path string) {
	t.Helper()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
