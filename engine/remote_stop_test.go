package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"apollo/engine/remote"
	"apollo/eventlog"
)

// failDispatchFS fails the write of the local log that carries the
// DISPATCH of one step: the run stops on a failure of its log.
type failDispatchFS struct {
	eventlog.OS
	step string
}

type failDispatchFile struct {
	*os.File
	match []byte
}

func (fs failDispatchFS) OpenFile(name string, flag int, perm os.FileMode) (eventlog.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &failDispatchFile{File: f, match: []byte(`"step_id":"` + fs.step + `"`)}, nil
}

func (f *failDispatchFile) Write(b []byte) (int, error) {
	if bytes.Contains(b, []byte(`"DISPATCH"`)) && bytes.Contains(b, f.match) {
		return 0, errors.New("injected: no space left on device")
	}
	return f.File.Write(b)
}

// TestHubFailedRunLeavesAttemptsRunning: a coordinator that stops because
// its log failed (or its hub, or its lease) does not ask the workers to
// end the task's attempts — that is an interrupted run's request, and the
// attempts are the next run's to adopt (a coordinator paused past its
// lease would otherwise end the attempts another has adopted). The
// attempt in flight runs to its end, once, and the next run records it
// done without running it again.
func TestHubFailedRunLeavesAttemptsRunning(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	e.startWorker("w1", e.cl.URLs(), nil)
	marks := t.TempDir()
	path := e.pipeline("leave", `task_name: leave
steps:
  - id: long
    command: 'touch "`+marks+`/long.$APOLLO_RETRY_COUNT.started"; sleep 4; touch "`+marks+`/long.$APOLLO_RETRY_COUNT.ended"'
    cleanup_command: "true"
  - id: quick
    command: "sleep 2"
  - id: after
    command: "true"
    depends_on: [quick]
`)
	eng := New(Options{StateDir: filepath.Join(e.dir, ".apollo"), Workdir: e.dir, Stdout: io.Discard,
		Stderr: io.Discard, Progress: ProgressQuiet, KillGrace: 500 * time.Millisecond, FS: failDispatchFS{step: "after"}})
	ro := RunOptions{TaskID: e.task, Hub: HubOptions{URLs: e.cl.URLs(), CallTimeout: time.Second, GiveUp: 20 * time.Second,
		LeaseTTL: 6 * time.Second}}
	began := time.Now()
	if err := eng.Run(t.Context(), path, ro); err == nil || !bytes.Contains([]byte(err.Error()), []byte("injected")) {
		t.Fatalf("the run with a failing log: %v, want the injected write error", err)
	}
	if _, err := os.Stat(filepath.Join(marks, "long.0.started")); err != nil {
		t.Fatalf("long had not started when the run stopped: %v", err)
	}
	ended := filepath.Join(marks, "long.0.ended")
	for time.Since(began) < 15*time.Second {
		if _, err := os.Stat(ended); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(ended); err != nil {
		t.Fatalf("long's body did not run to its end after its coordinator stopped on a failure (%v): the worker was asked to end it", err)
	}

	if err := e.run(t.Context(), path, e.cl.URLs(), nil); err != nil {
		t.Fatalf("the next run: %v", err)
	}
	recs := e.logOf(e.task)
	for _, r := range recs {
		if r.EventType == eventlog.StepEnd && r.StepID == "long" && (r.Status != eventlog.Success || r.RetryCount != 0 || r.Interrupted) {
			t.Errorf("long's STEP_END: status %s, attempt %d, interrupted %v; want attempt 0's success", r.Status, r.RetryCount, r.Interrupted)
		}
	}
	if starts, _ := filepath.Glob(filepath.Join(marks, "long.*.started")); len(starts) != 1 {
		t.Errorf("long's body ran %d times, want once: %v", len(starts), starts)
	}
	e.checkInvariants(e.task, 3)
}

// TestHubMayCancel: a coordinator asks the workers to end its attempts
// only when it was interrupted, its hub has not failed it, and its lease
// was renewed within the last three quarters of its TTL — a coordinator
// resumed after a pause past its lease may no longer hold the task.
func TestHubMayCancel(t *testing.T) {
	e := newHubEnv(t, 1)
	c := e.client(e.cl.URLs())
	if err := c.Ensure(t.Context(), 1, false); err != nil {
		t.Fatal(err)
	}
	lease, err := c.AcquireLease(t.Context(), e.task, remote.Holder{Host: "h", PID: 1, StateDir: e.dir}, 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	interrupted, stop := context.WithCancel(t.Context())
	stop()
	failedRun, fail := context.WithCancelCause(t.Context())
	fail(&runFailed{errors.New("disk full")})
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		renewed time.Duration // ago
		hubDown bool
		want    bool
	}{
		{"interrupted, lease fresh", interrupted, time.Second, false, true},
		{"interrupted, lease older than 3/4 of its TTL", interrupted, 5 * time.Second, false, false},
		{"the run failed", failedRun, time.Second, false, false},
		{"the hub failed the run", interrupted, time.Second, true, false},
	} {
		h := &hubRun{lease: lease, failed: make(chan struct{}), renewedAt: time.Now().Add(-tc.renewed)}
		if tc.hubDown {
			close(h.failed)
		}
		if got := h.mayCancel(tc.ctx); got != tc.want {
			t.Errorf("%s: mayCancel %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHubInterruptedRunEndsAttempts: an interrupted coordinator (Ctrl-C)
// asks the workers to end the task's attempts and records their ends as
// interrupted (docs/spec.md §8.4).
func TestHubInterruptedRunEndsAttempts(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	tw := e.startWorker("w1", e.cl.URLs(), nil)
	path := e.pipeline("stop", `task_name: stop
steps:
  - id: long
    command: 'sleep 5; echo slept'
`)
	ctx, interrupt := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- e.run(ctx, path, e.cl.URLs(), nil) }()
	s := <-tw.starts
	interrupt()
	<-done
	for i := 0; i < 40 && syscall.Kill(-s.pgid, 0) == nil; i++ {
		time.Sleep(50 * time.Millisecond) // its last process reaped
	}
	if syscall.Kill(-s.pgid, 0) == nil {
		t.Errorf("long's body (process group %d) still runs after its coordinator was interrupted", s.pgid)
	}
	var ends []*eventlog.Record
	for _, r := range e.logOf(e.task) {
		if r.EventType == eventlog.StepEnd && r.StepID == "long" {
			ends = append(ends, r)
		}
	}
	if len(ends) != 1 || !ends[0].Interrupted || ends[0].RetryCount != 0 {
		var got []string
		for _, r := range ends {
			got = append(got, describeEnd(r))
		}
		t.Fatalf("long's STEP_ENDs %v, want one of attempt 0, interrupted", got)
	}
}

// TestHubCancelEndsTheNamedAttempts: a request to end a task's attempts
// ends those it names and no other — one that reaches a worker late names
// attempts the task has moved past, and leaves its newer ones running.
func TestHubCancelEndsTheNamedAttempts(t *testing.T) {
	needSeconds(t)
	e := newHubEnv(t, 1)
	tw := e.startWorker("w1", e.cl.URLs(), nil)
	path := e.pipeline("named", `task_name: named
steps:
  - id: a
    command: 'sleep 3; echo a'
  - id: b
    command: 'sleep 3; echo b'
`)
	done := make(chan error, 1)
	go func() { done <- e.run(t.Context(), path, e.cl.URLs(), nil) }()
	<-tw.starts
	<-tw.starts
	req, _ := json.Marshal(remote.Cancel{Attempts: []remote.CancelAttempt{{Step: "a", Attempt: 0}, {Step: "b", Attempt: 5}}})
	c := e.client(e.cl.URLs())
	if err := c.NC.Publish(remote.CancelSubject(e.task), req); err != nil {
		t.Fatal(err)
	}
	c.NC.Flush()
	<-done
	ends := map[string]*eventlog.Record{}
	for _, r := range e.logOf(e.task) {
		if r.EventType == eventlog.StepEnd {
			ends[r.StepID] = r
		}
	}
	if r := ends["a"]; r == nil || !r.Interrupted || r.RetryCount != 0 {
		t.Errorf("a's STEP_END: %s, want attempt 0 interrupted", describeEnd(r))
	}
	if r := ends["b"]; r == nil || r.Status != eventlog.Success || r.Interrupted {
		t.Errorf("b's STEP_END: %s, want a success: the request named attempt 5 of b, not the one running", describeEnd(r))
	}
}

// describeEnd says what a STEP_END (or its absence) recorded.
func describeEnd(r *eventlog.Record) string {
	if r == nil {
		return "none"
	}
	return fmt.Sprintf("attempt %d %s (interrupted %v: %s)", r.RetryCount, r.Status, r.Interrupted, r.ErrorMessage)
}

// pipeline writes a pipeline file named name.yaml into the workspace.
func (e *hubEnv) pipeline(name, yaml string) string {
	e.t.Helper()
	path := filepath.Join(e.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}
