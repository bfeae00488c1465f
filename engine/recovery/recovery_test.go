package recovery

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"apollo/engine/statedir"
	"apollo/eventlog"
)

// writeTask writes a task's log with steps a and b succeeded, as a run
// leaves it, in a state folder under a temporary workspace.
func writeTask(t *testing.T) (stateDir, workdir string) {
	t.Helper()
	workdir = t.TempDir()
	stateDir = filepath.Join(workdir, ".apollo")
	dir := statedir.Dir{Root: stateDir}
	if err := os.MkdirAll(dir.Logs(), 0o755); err != nil {
		t.Fatal(err)
	}
	steps := []eventlog.StepInfo{{ID: "a"}, {ID: "b", DependsOn: []string{"a"}}}
	w, err := eventlog.Open(dir.Log("t1", time.Now().Unix()), eventlog.WriterOptions{TaskID: "t1",
		First: &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running,
			Start: &eventlog.StartInfo{Version: eventlog.Version, TaskName: "t", Steps: steps}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		for _, r := range []*eventlog.Record{
			{EventType: eventlog.StepStart, StepID: id, Status: eventlog.Running},
			{EventType: eventlog.StepEnd, StepID: id, Status: eventlog.Success},
		} {
			if err := w.AppendDurable(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return stateDir, workdir
}

func writeScript(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "fix.lua")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRunResets: a script reads the task's steps, resets one with a reason,
// and the log gains one WARNING naming the intervention; the script's
// output says what was appended.
func TestRunResets(t *testing.T) {
	stateDir, workdir := writeTask(t)
	script := writeScript(t, workdir, `local state = require("apollo.state")
for _, s in ipairs(state.steps()) do print(s.id, s.status) end
state.reset(arg[1], "input fixed")`)
	var out bytes.Buffer
	if err := Run(t.Context(), script, Options{TaskID: "t1", Args: []string{"b"}, StateDir: stateDir,
		Workdir: workdir, Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"a\tSUCCESS", "b\tSUCCESS", "appended to", `step "b" reset`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	path, err := statedir.Dir{Root: stateDir}.LatestLog("t1")
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{TaskID: "t1"})
	if err != nil {
		t.Fatal(err)
	}
	last := recs[len(recs)-1]
	if last.EventType != eventlog.Warning || last.StepID != "b" || last.Intervention == nil ||
		!strings.Contains(last.Message, "input fixed") {
		t.Errorf("last record %+v, want a WARNING resetting b with its reason", last)
	}
	if st := eventlog.Replay("t1", recs).Step("b"); st.Status == eventlog.Success {
		t.Errorf("b is still SUCCESS after its reset")
	}
}

// TestRunErrors: a task without a log, a script that fails and a step the
// task does not have are errors, and the log is left as it was.
func TestRunErrors(t *testing.T) {
	stateDir, workdir := writeTask(t)
	path, _ := statedir.Dir{Root: stateDir}.LatestLog("t1")
	before, _ := os.ReadFile(path)

	var nf *statedir.NotFoundError
	if err := Run(t.Context(), writeScript(t, workdir, "return"), Options{TaskID: "nosuch", StateDir: stateDir,
		Workdir: workdir}); !errors.As(err, &nf) {
		t.Errorf("unknown task: %v, want a NotFoundError", err)
	}
	var se *Error
	if err := Run(t.Context(), writeScript(t, workdir, `error("boom")`), Options{TaskID: "t1", StateDir: stateDir,
		Workdir: workdir}); !errors.As(err, &se) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("failing script: %v, want a recovery.Error saying boom", err)
	}
	script := writeScript(t, workdir, `require("apollo.state").reset("nosuch", "why")`)
	if err := Run(t.Context(), script, Options{TaskID: "t1", StateDir: stateDir, Workdir: workdir}); err == nil ||
		!strings.Contains(err.Error(), `no step "nosuch"`) {
		t.Errorf("unknown step: %v, want no step \"nosuch\"", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Errorf("the log changed:\n%s", after)
	}
}
