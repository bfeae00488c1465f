package engine

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"apollo/eventlog"
)

// TestSnapshotResume: an invocation ends with a snapshot equal to the
// replay of its log; the next resumes from it; a snapshot that does not
// match the log is ignored with a WARNING, and the run is the same.
func TestSnapshotResume(t *testing.T) {
	const yaml = `
task_name: snap
parallelism: 2
steps:
  - id: a
    command: echo a
  - id: flaky
    command: test -f ok
    depends_on: [a]
  - id: c
    command: echo c
    depends_on: [flaky]
`
	dir := t.TempDir()
	snapPath := filepath.Join(dir, ".apollo", "state", "t.snapshot.json")
	logOf := func() string {
		logs, _ := filepath.Glob(filepath.Join(dir, ".apollo", "logs", "task_t_*.jsonl"))
		return logs[len(logs)-1]
	}
	checkSnapshot := func(when string, full *eventlog.State) {
		t.Helper()
		s, err := eventlog.LoadSnapshot(snapPath, logOf(), "t")
		if err != nil {
			t.Fatalf("%s: LoadSnapshot: %v", when, err)
		}
		if got, want := asJSON(t, s.State), asJSON(t, full); !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: snapshot state =\n%v\nwant the log's replay\n%v", when, got, want)
		}
	}

	err, st, _ := runPipeline(t, dir, yaml, RunOptions{}, Options{})
	if err == nil || st.Step("flaky").Status != eventlog.Failed {
		t.Fatalf("first run = %v, flaky %s; want it to fail", err, st.Step("flaky").Status)
	}
	checkSnapshot("after a failed run", st)

	os.WriteFile(filepath.Join(dir, "ok"), nil, 0o644)
	err, st, _ = runPipeline(t, dir, yaml, RunOptions{}, Options{})
	if err != nil || !st.Complete() || st.Step("a").Attempts != 1 {
		t.Fatalf("resume from the snapshot = %v, complete %v, a ran %d times; want complete, a kept", err, st.Complete(), st.Step("a").Attempts)
	}
	checkSnapshot("after the resume", st)
	for _, r := range readLog(t, logOf()) {
		if r.EventType == eventlog.Warning {
			t.Errorf("resume from a good snapshot wrote a WARNING: %s", r.Message)
		}
	}

	// A damaged snapshot: ignored, said so, and the result is the same.
	data, _ := os.ReadFile(snapPath)
	os.WriteFile(snapPath, []byte(strings.Replace(string(data), `"SUCCESS"`, `"FAILED"`, 1)), 0o644)
	err, st, _ = runPipeline(t, dir, yaml, RunOptions{ResumeFrom: "c"}, Options{})
	if err != nil || !st.Complete() || st.Step("a").Attempts != 1 || st.Step("c").Attempts != 2 {
		t.Fatalf("run over a damaged snapshot = %v, complete %v", err, st.Complete())
	}
	warned := false
	for _, r := range readLog(t, logOf()) {
		warned = warned || (r.EventType == eventlog.Warning && strings.Contains(r.Message, "snapshot ignored"))
	}
	if !warned {
		t.Error("no WARNING says the damaged snapshot was ignored")
	}
	checkSnapshot("after a run over a damaged snapshot", st)
}

func readLog(t *testing.T, path string) []*eventlog.Record {
	t.Helper()
	recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func asJSON(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
