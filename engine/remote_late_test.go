package engine

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"apollo/engine/remote"
	"apollo/eventlog"
)

// TestHubLateEndOfReplacedAttempt (docs/spec.md §8.3, §8.7): attempt 0 of
// a step is started by a worker that then goes silent; the coordinator
// records it LOST, cleans it up and dispatches attempt 1 on another worker.
// While attempt 1 runs, an end of attempt 0 arrives, built from attempt 0's
// own message (its run, secret and pool) as its worker would send it had it
// finished anyway. That end is a WARNING only: the step's one STEP_END is
// attempt 1's, its dependent runs once, after attempt 1, and the task
// succeeds.
func TestHubLateEndOfReplacedAttempt(t *testing.T) {
	needCluster(t)
	e := newHubEnv(t, 3)
	// The shared hub keeps each task's log (§8.8): a task id of its own
	// for each run of the test (-count=N), which would otherwise be taken
	// for the same task moved to another pipeline file.
	e.task += "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	urls := e.cl.URLs()
	victim := e.startWorker("victim", urls, nil)
	gate := filepath.Join(e.dir, "late-end-sent")
	// Attempt 0 sleeps until its worker dies; attempt 1 waits (at most
	// 30 s) for the late end of attempt 0 to be stored in the hub, so that
	// the coordinator takes that end in while attempt 1 is the step's
	// current attempt.
	body := `touch "$APOLLO_ARTIFACTS_DIR/$APOLLO_STEP_ID.$APOLLO_RETRY_COUNT.$APOLLO_WORKER"; ` +
		`if [ "$APOLLO_RETRY_COUNT" = 0 ]; then sleep 60; exit 1; fi; ` +
		`i=0; while [ ! -e '` + gate + `' ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; [ -e '` + gate + `' ]`
	path := filepath.Join(e.dir, "late.yaml")
	yaml := fmt.Sprintf(`task_name: late
max_dirty_restarts: 3
steps:
  - id: a
    command: %q
    cleanup_command: "true"
  - id: b
    command: 'touch "$APOLLO_ARTIFACTS_DIR/$APOLLO_STEP_ID.$APOLLO_RETRY_COUNT.$APOLLO_WORKER"'
    cleanup_command: "true"
    depends_on: [a]
`, body)
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.run(ctx, path, urls, nil) }()
	ended := false // done was received
	// Whatever happens below, the run is over before the test returns.
	defer func() {
		cancel()
		if !ended {
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("the run did not stop within 30s of its cancellation")
			}
		}
	}()
	waitStart := func(tw *testWorker, what string) started {
		t.Helper()
		select {
		case s := <-tw.starts:
			return s
		case err := <-done:
			ended = true
			t.Fatalf("the run ended (%v) before %s", err, what)
		case <-ctx.Done():
			t.Fatalf("no %s within the run's deadline", what)
		}
		return started{}
	}

	first := waitStart(victim, "start of attempt 0 on the victim")
	if first.work.Step != "a" || first.work.Attempt != 0 {
		t.Fatalf("the victim started %s attempt %d, want a attempt 0", first.work.Step, first.work.Attempt)
	}
	began := time.Now()
	w2 := e.startWorker("w2", urls, nil)
	victim.die(first.pgid) // silent past the liveness deadline: w2 reports it lost on its redelivery
	second := waitStart(w2, "start of attempt 1 on w2")
	if second.work.Step != "a" || second.work.Attempt != 1 {
		t.Fatalf("w2 started %s attempt %d, want a attempt 1", second.work.Step, second.work.Attempt)
	}

	// The end attempt 0's worker would report had it finished after all:
	// made from its own message, as the worker makes it (worker.endEvent).
	host, _ := os.Hostname()
	victimID := host + ":" + strconv.Itoa(os.Getpid()) + ":victim"
	w := first.work
	late := &remote.Event{Type: remote.EventEnd, Run: w.Run, Task: w.Task, Step: w.Step, Attempt: w.Attempt,
		Pool: w.Pool, Secret: w.Secret, Worker: victimID, Delivery: 1, ExitCode: 0,
		DurationMS: time.Since(began).Milliseconds()}
	rctx, rcancel := context.WithTimeout(ctx, 20*time.Second)
	_, err := e.client(urls).Report(rctx, late)
	rcancel()
	if err != nil {
		t.Fatalf("report the late end: %v", err)
	}
	// Stored: attempt 1's end, which comes after the gate opens, is behind
	// it in the hub's event stream, so the coordinator takes the late end
	// in while attempt 1 is still the step's current attempt.
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		ended = true
		if err != nil {
			t.Fatalf("the run: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the run did not end within its deadline")
	}

	recs := e.logOf(e.task)
	e.checkInvariants(e.task, 2)
	if !hasLost(recs, attemptKey{"a", 0}) {
		t.Error("no LOST for attempt 0 of a, whose worker went silent")
	}
	want := fmt.Sprintf("late end of attempt 0 of step a from worker %s (succeeded), which is no longer the step's current attempt; "+
		"not recorded as the step's end", victimID)
	warning, dispatched1, end1 := -1, -1, -1
	var aEnds []*eventlog.Record
	bStarts, bDispatches, lateWarnings := 0, 0, 0
	var summary *eventlog.Record
	for i, r := range recs {
		switch {
		case r.EventType == eventlog.Warning && strings.Contains(r.Message, "late end of attempt"):
			lateWarnings++
			if r.Message == want && r.StepID == "a" && r.RetryCount == 0 && r.Worker == victimID {
				warning = i
			} else {
				t.Errorf("WARNING %q (step %s, attempt %d, worker %s), want %q (step a, attempt 0, worker %s)",
					r.Message, r.StepID, r.RetryCount, r.Worker, want, victimID)
			}
		case r.EventType == eventlog.Warning && strings.Contains(r.Message, "refused"):
			t.Errorf("the late end was refused instead of taken as attempt 0's: %q", r.Message)
		case r.EventType == eventlog.Dispatch && r.StepID == "a" && r.RetryCount == 1:
			dispatched1 = i
		case r.EventType == eventlog.StepEnd && r.StepID == "a":
			aEnds = append(aEnds, r)
			if r.RetryCount == 1 {
				end1 = i
			}
		case r.EventType == eventlog.StepStart && r.StepID == "b":
			bStarts++
		case r.EventType == eventlog.Dispatch && r.StepID == "b":
			bDispatches++
		case r.EventType == eventlog.TaskSummary:
			summary = r
		}
	}
	if len(aEnds) != 1 || aEnds[0].RetryCount != 1 || aEnds[0].Status != eventlog.Success {
		var got []string
		for _, r := range aEnds {
			got = append(got, fmt.Sprintf("attempt %d %s (worker %s)", r.RetryCount, r.Status, r.Worker))
		}
		t.Errorf("STEP_ENDs of a: %v, want one: attempt 1 SUCCESS", got)
	}
	if lateWarnings != 1 || warning < 0 {
		t.Errorf("%d WARNINGs of a late end, want one: %q", lateWarnings, want)
	} else if dispatched1 < 0 || end1 < 0 || warning < dispatched1 || warning > end1 {
		t.Errorf("the late end's WARNING is record %d, want it between attempt 1's DISPATCH (%d) and its STEP_END (%d): "+
			"taken in while attempt 1 was current", warning, dispatched1, end1)
	}
	if bStarts != 1 || bDispatches != 1 {
		t.Errorf("b was dispatched %d and started %d times, want once each", bDispatches, bStarts)
	}
	if summary == nil || summary.Status != eventlog.Success {
		t.Errorf("TASK_SUMMARY %+v, want SUCCESS", summary)
	}
	ran, _ := filepath.Glob(filepath.Join(e.dir, ".apollo", "artifacts", e.task, "b.*"))
	if len(ran) != 1 {
		t.Errorf("b ran %d times (%v), want once", len(ran), ran)
	}
}
