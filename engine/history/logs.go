package history

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/engine/textfmt"
	"apollo/engine/usage"
	"apollo/eventlog"
)

// LogsOptions are the flags of apollo logs.
type LogsOptions struct {
	// Step selects a step's output; "" prints the run's events.
	Step string
	// Attempt is the attempt (retry_count) whose output is printed; -1
	// means the latest.
	Attempt int
	// Follow keeps printing what a live run adds until it ends (a
	// TASK_SUMMARY, and no runner holds the task) or ctx is done.
	Follow bool
	// Poll is how often a followed file is read again; 0 means 200ms.
	Poll time.Duration
	// Location is the time zone of printed times; nil means time.Local.
	Location *time.Location
}

// Logs prints a task's events (one readable line per record) or the output
// of one of its step attempts to the engine's Stdout. A task whose log was
// archived by apollo gc still shows its events; its outputs are gone.
func (h Runs) Logs(ctx context.Context, taskID string, o LogsOptions) error {
	if err := statedir.ValidTaskID(taskID); err != nil {
		return &usage.Error{Msg: err.Error()}
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.Location == nil {
		o.Location = time.Local
	}
	path, archived, err := h.Dir.FindLog(taskID)
	if err != nil {
		return err
	}
	if path == "" {
		return &statedir.NotFoundError{TaskID: taskID, StateDir: h.Dir.Root, Suggestion: pipeline.Suggest(taskID, h.Dir.KnownTasks())}
	}
	w := h.stdout()
	t := &logTail{dir: h.Dir, taskID: taskID, path: path, idle: func() {
		fmt.Fprintf(h.stderr(), "apollo: no runner holds task %s and its last run did not finish; "+
			"waiting for a run to resume it (Ctrl-C to stop)\n", taskID)
	}}
	if o.Step == "" {
		t.visit = func(r *eventlog.Record) { fmt.Fprintln(w, FormatRecord(r, o.Location)) }
		t.switched = func(path string) { fmt.Fprintf(w, "--- new log %s ---\n", path) }
	}
	if archived {
		if _, _, err := statedir.Replay(path, taskID, t.apply); err != nil {
			return err
		}
		if o.Step != "" {
			return archivedOutput(t, o.Step)
		}
		return nil
	}
	if err := t.poll(); err != nil {
		return err
	}
	if o.Step == "" {
		if !o.Follow {
			return nil
		}
		return t.follow(ctx, o.Poll, nil)
	}
	return h.stepOutput(ctx, t, o)
}

// archivedOutput explains that an archived run's outputs are gone.
func archivedOutput(t *logTail, step string) error {
	if err := t.knownStep(step); err != nil {
		return err
	}
	return &usage.Error{Msg: fmt.Sprintf("task %s was archived by apollo gc (%s), which removed its output files; "+
		"`apollo logs %s` still shows its events", t.taskID, t.path, t.taskID)}
}

// stepOutput prints (and with Follow, follows) a step attempt's output.
// Output files are created on the first write, so an attempt that the log
// shows but that has no file printed nothing.
func (h Runs) stepOutput(ctx context.Context, t *logTail, o LogsOptions) error {
	w := h.stdout()
	if err := t.knownStep(o.Step); err != nil {
		return err
	}
	path := func(n int) string { return t.dir.Output(t.taskID, o.Step, n) }
	if !o.Follow {
		files, err := t.dir.OutputAttempts(t.taskID, o.Step)
		if err != nil {
			return err
		}
		all := mergeInts(t.attempts[o.Step], files)
		n := o.Attempt
		switch {
		case n < 0 && len(all) == 0:
			return &usage.Error{Msg: fmt.Sprintf("step %s of task %s has not run yet; use -f to wait for its output", o.Step, t.taskID)}
		case n < 0:
			n = all[len(all)-1]
		case !containsInt(all, n):
			return &usage.Error{Msg: fmt.Sprintf("step %s of task %s has no attempt %d; it has %s", o.Step, t.taskID, n, attemptList(all))}
		}
		if !containsInt(files, n) {
			fmt.Fprintf(h.stderr(), "apollo: attempt %d of step %s wrote no output\n", n, o.Step)
			return nil
		}
		return copyFrom(w, path(n), 0, nil)
	}
	// Follow the attempt's file as it grows; when no attempt was asked
	// for, move on to each newer attempt as the log shows it start.
	cur, off := o.Attempt, int64(0)
	pump := func() error {
		if as := t.attempts[o.Step]; o.Attempt < 0 && len(as) > 0 && as[len(as)-1] > cur {
			next := as[len(as)-1]
			if cur >= 0 {
				if _, err := copyFromN(w, path(cur), off); err != nil {
					return err
				}
				fmt.Fprintf(w, "--- attempt %d ---\n", next)
			}
			cur, off = next, 0
		}
		if cur < 0 {
			return nil
		}
		n, err := copyFromN(w, path(cur), off)
		off += n
		return err
	}
	return t.follow(ctx, o.Poll, pump)
}

// mergeInts returns the sorted union of two sorted lists.
func mergeInts(a, b []int) []int {
	out := append([]int(nil), a...)
	for _, x := range b {
		if !containsInt(out, x) {
			out = append(out, x)
		}
	}
	sort.Ints(out)
	return out
}

// copyFrom copies the file at path from offset off to w.
func copyFrom(w io.Writer, path string, off int64, n *int64) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("read output: %w", err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return fmt.Errorf("read output %s: %w", path, err)
	}
	c, err := io.Copy(w, f)
	if n != nil {
		*n = c
	}
	if err != nil {
		return fmt.Errorf("read output %s: %w", path, err)
	}
	return nil
}

// copyFromN is copyFrom for a file that may not exist yet (0 bytes).
func copyFromN(w io.Writer, path string, off int64) (int64, error) {
	var n int64
	err := copyFrom(w, path, off, &n)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	return n, err
}

func containsInt(list []int, v int) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func attemptList(as []int) string {
	if len(as) == 0 {
		return "none"
	}
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = strconv.Itoa(a)
	}
	return "attempt(s) " + strings.Join(s, ", ")
}

// logTail reads a task's live log incrementally, following it to a newer
// log when a run starts one (--fresh).
type logTail struct {
	dir    statedir.Dir
	taskID string
	path   string
	off    int64
	seq    int64
	// ended: the latest invocation read has its TASK_SUMMARY.
	ended bool
	steps []string
	// attempts lists, per step, the retry counts that have a STEP_START.
	attempts map[string][]int
	visit    func(*eventlog.Record)
	// switched is told when a newer log of the task appears.
	switched func(path string)
	// idle is told, once, that no runner holds a task that is not done.
	idle     func()
	idleSaid bool
}

func (t *logTail) apply(r *eventlog.Record) {
	switch r.EventType {
	case eventlog.TaskStart:
		t.ended = false
		if r.Start != nil {
			for _, s := range r.Start.Steps {
				if !containsString(t.steps, s.ID) {
					t.steps = append(t.steps, s.ID)
				}
			}
		}
	case eventlog.StepStart:
		if t.attempts == nil {
			t.attempts = map[string][]int{}
		}
		if as := t.attempts[r.StepID]; !containsInt(as, r.RetryCount) {
			t.attempts[r.StepID] = mergeInts(as, []int{r.RetryCount})
		}
	case eventlog.TaskSummary:
		t.ended = true
	}
	if t.visit != nil {
		t.visit(r)
	}
}

// poll reads the records appended since the last poll.
func (t *logTail) poll() error {
	tail, err := eventlog.Read(t.path, eventlog.ReadOptions{TaskID: t.taskID, Offset: t.off, Seq: t.seq}, func(r *eventlog.Record) error {
		t.apply(r)
		return nil
	})
	if err != nil {
		return err
	}
	t.off, t.seq = tail.End, tail.LastSeq
	return nil
}

// knownStep checks that step is a step of the task, as its log names them.
func (t *logTail) knownStep(step string) error {
	if len(t.steps) == 0 || containsString(t.steps, step) {
		return nil
	}
	return &usage.Error{Msg: fmt.Sprintf("task %s has no step %q%s; its steps are %s",
		t.taskID, step, pipeline.DidYouMean(step, t.steps), strings.Join(t.steps, ", "))}
}

// follow polls the log (and calls pump, if any, after each poll) until
// the run ends or ctx is done.
func (t *logTail) follow(ctx context.Context, every time.Duration, pump func() error) error {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		// The runner writes its TASK_SUMMARY before it lets the lock go, so
		// a summary read after the lock was seen free is the last record.
		_, held := eventlog.Holder(t.dir.Lock(t.taskID))
		if err := t.poll(); err != nil {
			return err
		}
		if latest, err := t.dir.LatestLog(t.taskID); err == nil && latest != "" && latest != t.path {
			t.path, t.off, t.seq, t.ended = latest, 0, 0, false
			if t.switched != nil {
				t.switched(latest)
			}
			continue
		}
		if pump != nil {
			if err := pump(); err != nil {
				return err
			}
		}
		if !held && t.ended {
			return nil
		}
		if !held && !t.idleSaid && t.idle != nil {
			t.idleSaid = true
			t.idle()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func containsString(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// FormatRecord renders one log record as a readable line: time, step,
// event, status, attempt, then the error or message.
func FormatRecord(r *eventlog.Record, loc *time.Location) string {
	ts := r.Timestamp
	if t, err := time.Parse(time.RFC3339Nano, r.Timestamp); err == nil {
		ts = t.In(loc).Format("2006-01-02 15:04:05.000")
	}
	step := r.StepID
	if step == "" {
		step = "-"
	}
	line := fmt.Sprintf("%s  %-20s %-12s %-8s attempt %d", ts, step, r.EventType, r.Status, r.RetryCount)
	if d := recordDetail(r); d != "" {
		line += "  " + textfmt.OneLine(d, 300)
	}
	return line
}

func recordDetail(r *eventlog.Record) string {
	var parts []string
	switch r.EventType {
	case eventlog.TaskStart:
		if s := r.Start; s != nil {
			parts = append(parts, fmt.Sprintf("invocation %d of %s (%s), %d steps, pid %d on %s",
				s.Invocation, s.TaskName, s.Pipeline, len(s.Steps), s.PID, s.Host))
		}
	case eventlog.StepEnd:
		if r.Status != eventlog.Skipped {
			parts = append(parts, "in "+textfmt.Duration(time.Duration(r.DurationMS)*time.Millisecond).String())
		}
		if r.TimedOut {
			parts = append(parts, "timed out")
		}
		if r.Interrupted {
			parts = append(parts, "interrupted")
		}
		if r.NextDelayMS > 0 {
			parts = append(parts, "retry in "+textfmt.Duration(time.Duration(r.NextDelayMS)*time.Millisecond).String())
		}
	case eventlog.StepProcess:
		parts = append(parts, fmt.Sprintf("process group %d", r.PGID))
	case eventlog.Marker:
		if m := r.Marker; m != nil {
			parts = append(parts, fmt.Sprintf("marker %s %s", m.Name, m.State))
		}
	case eventlog.NotifySending, eventlog.NotifySent, eventlog.NotifyFailed:
		if n := r.Notify; n != nil {
			s := fmt.Sprintf("notification %s %s to %s", n.ID, n.Event, n.Target)
			if n.Attempts > 1 {
				s += fmt.Sprintf(" (%d tries)", n.Attempts)
			}
			parts = append(parts, s)
		}
	case eventlog.TaskSummary:
		if s := r.Summary; s != nil {
			var counts []string
			for _, st := range []string{eventlog.Success, eventlog.Failed, eventlog.Skipped, eventlog.Pending, eventlog.Running} {
				if n := s.Counts[st]; n > 0 {
					counts = append(counts, fmt.Sprintf("%d %s", n, st))
				}
			}
			parts = append(parts, strings.Join(counts, ", "))
			if s.Interrupted {
				parts = append(parts, "interrupted")
			}
		}
		parts = append(parts, "in "+textfmt.Duration(time.Duration(r.DurationMS)*time.Millisecond).String())
	}
	if r.ErrorMessage != "" {
		parts = append(parts, "error: "+r.ErrorMessage)
	}
	if r.Message != "" {
		parts = append(parts, r.Message)
	}
	return strings.Join(parts, "; ")
}
