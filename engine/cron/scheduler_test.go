package cron

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/engine/clock"
	"apollo/engine/pipeline"
)

// world is a fake of what the scheduler looks at: tasks complete, runners
// holding tasks, and the children it starts, which end when told.
type world struct {
	mu       sync.Mutex
	complete map[string]bool
	held     map[string]bool
	started  []Job
	exits    map[string]chan int
}

func newWorld() *world {
	return &world{complete: map[string]bool{}, held: map[string]bool{}, exits: map[string]chan int{}}
}

func (w *world) launch(job Job, stateDir, output string) (*Process, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.started = append(w.started, job)
	ch := make(chan int, 1)
	w.exits[job.TaskID] = ch
	return &Process{PID: 1000 + len(w.started), Wait: func() int { return <-ch }}, nil
}

// finish ends the child of taskID with code, as if its task ran.
func (w *world) finish(t *testing.T, s *Scheduler, taskID string, code int) {
	t.Helper()
	w.mu.Lock()
	ch := w.exits[taskID]
	delete(w.exits, taskID)
	if code == 0 {
		w.complete[taskID] = true
	}
	w.mu.Unlock()
	if ch == nil {
		t.Fatalf("no child of task %s runs", taskID)
	}
	ch <- code
	s.Wait()
}

func (w *world) startedIDs() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var ids []string
	for _, j := range w.started {
		ids = append(ids, j.TaskID+"/"+j.Trigger)
	}
	return strings.Join(ids, " ")
}

func pipe(t *testing.T, cron string, catchup string, limit int, overlap string) Pipe {
	t.Helper()
	sch, err := pipeline.ParseCron(cron, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	sch.Catchup, sch.CatchupLimit, sch.Overlap = catchup, limit, overlap
	return Pipe{Rel: "nightly.yaml", Path: "/p/nightly.yaml", TaskName: "nightly", Schedule: sch}
}

func open(t *testing.T, dir string, clk clock.Clock, w *world, p Pipe) *Scheduler {
	t.Helper()
	s, err := New(Options{StateDir: dir, Clock: clk, Launch: w.launch,
		Complete: func(_, id string) bool { w.mu.Lock(); defer w.mu.Unlock(); return w.complete[id] },
		Holder:   func(_, id string) (int, bool) { w.mu.Lock(); defer w.mu.Unlock(); return 7, w.held[id] }})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetPipes([]Pipe{p}); err != nil {
		t.Fatal(err)
	}
	return s
}

// events lists the log's entries as "event task trigger" lines.
func events(t *testing.T, dir string) string {
	t.Helper()
	entries, _, _, err := ReadLog(LogName(dir))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, e := range entries {
		line := e.Event
		if e.TaskID != "" {
			line += " " + e.TaskID
		}
		if e.Trigger != "" {
			line += " " + e.Trigger
		}
		if e.Count > 0 {
			line += " count=" + strconv.Itoa(e.Count)
		}
		lines = append(lines, line)
	}
	return strings.Join(lines, "\n")
}

var start = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

// TestOnTime: a schedule seen for the first time counts from now; at its
// time a run starts with the task of that date; the next time finds it
// still going and skips.
func TestOnTime(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(start)
	w := newWorld()
	s := open(t, dir, clk, w, pipe(t, "0 2 * * *", pipeline.CatchupLatest, 10, pipeline.OverlapSkip))
	defer s.Close()
	if next := s.Tick(); !next.Equal(time.Date(2026, 11, 2, 2, 0, 0, 0, time.UTC)) {
		t.Errorf("next = %s, want 2026-11-02T02:00", next)
	}
	clk.Advance(14*time.Hour + 5*time.Second)
	s.Tick()
	clk.Advance(24 * time.Hour)
	s.Tick()
	if got, want := w.startedIDs(), "nightly-2026-11-02/schedule"; got != want {
		t.Errorf("started %q, want %q", got, want)
	}
	if got := w.started[0].TaskDate; got != "2026-11-02" {
		t.Errorf("task_date = %s, want 2026-11-02", got)
	}
	if lag := s.Lags()["nightly.yaml"]; lag != 5*time.Second {
		t.Errorf("lag = %v, want 5s", lag)
	}
	w.finish(t, s, "nightly-2026-11-02", 0)
	want := "tracked\nstarted nightly-2026-11-02 schedule\nskipped nightly-2026-11-03 schedule\nexited nightly-2026-11-02"
	if got := events(t, dir); got != want {
		t.Errorf("schedule log:\n%s\nwant:\n%s", got, want)
	}
}

// TestCatchup: after serve was down for five scheduled times, each policy
// runs what it says and records the rest as missed.
func TestCatchup(t *testing.T) {
	tests := []struct {
		catchup string
		limit   int
		want    string
		started string
	}{
		{pipeline.CatchupNone, 10, "missed count=5", ""},
		{pipeline.CatchupLatest, 10, "missed count=4\nqueued nightly-2026-11-06 catchup\nstarted nightly-2026-11-06 catchup",
			"nightly-2026-11-06/catchup"},
		{pipeline.CatchupAll, 3, "missed count=2\nqueued nightly-2026-11-04 catchup\nqueued nightly-2026-11-05 catchup\n" +
			"queued nightly-2026-11-06 catchup\nstarted nightly-2026-11-04 catchup", "nightly-2026-11-04/catchup"},
	}
	for _, tt := range tests {
		t.Run(tt.catchup, func(t *testing.T) {
			dir := t.TempDir()
			clk := clock.NewFake(start)
			w := newWorld()
			p := pipe(t, "0 2 * * *", tt.catchup, tt.limit, pipeline.OverlapSkip)
			open(t, dir, clk, w, p).Close() // serve stops right after it saw the schedule
			clk.Advance(5*24*time.Hour + time.Hour)
			s := open(t, dir, clk, w, p)
			defer s.Close()
			s.Tick()
			if got, want := events(t, dir), "tracked\n"+tt.want; got != want {
				t.Errorf("schedule log:\n%s\nwant:\n%s", got, want)
			}
			if got := w.startedIDs(); got != tt.started {
				t.Errorf("started %q, want %q", got, tt.started)
			}
			if tt.catchup == pipeline.CatchupAll { // the queue runs one at a time, oldest first
				w.finish(t, s, "nightly-2026-11-04", 0)
				s.Tick()
				w.finish(t, s, "nightly-2026-11-05", 1)
				s.Tick()
				if got, want := w.startedIDs(), "nightly-2026-11-04/catchup nightly-2026-11-05/catchup nightly-2026-11-06/catchup"; got != want {
					t.Errorf("started %q, want %q", got, want)
				}
			}
		})
	}
}

// TestOverlapQueue: a time that comes while a run goes on waits for it.
func TestOverlapQueue(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(start)
	w := newWorld()
	s := open(t, dir, clk, w, pipe(t, "@hourly", pipeline.CatchupNone, 10, pipeline.OverlapQueue))
	defer s.Close()
	clk.Advance(time.Hour)
	s.Tick()
	clk.Advance(time.Hour)
	s.Tick()
	if got, want := w.startedIDs(), "nightly-2026-11-01T1300/schedule"; got != want {
		t.Fatalf("started %q, want %q", got, want)
	}
	w.finish(t, s, "nightly-2026-11-01T1300", 0)
	s.Tick()
	if got, want := w.startedIDs(), "nightly-2026-11-01T1300/schedule nightly-2026-11-01T1400/schedule"; got != want {
		t.Errorf("started %q, want %q", got, want)
	}
}

// TestCompleteDoesNothing: a scheduled time whose task is complete is
// skipped, and says so.
func TestCompleteDoesNothing(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(start)
	w := newWorld()
	w.complete["nightly-2026-11-02"] = true
	s := open(t, dir, clk, w, pipe(t, "0 2 * * *", pipeline.CatchupLatest, 10, pipeline.OverlapSkip))
	defer s.Close()
	clk.Advance(14 * time.Hour)
	s.Tick()
	if got := w.startedIDs(); got != "" {
		t.Errorf("started %q, want nothing", got)
	}
	if got, want := events(t, dir), "tracked\nskipped nightly-2026-11-02 schedule"; got != want {
		t.Errorf("schedule log:\n%s\nwant:\n%s", got, want)
	}
}

// TestRestartNeitherMissesNorDoubles: serve stops while its run goes on.
// A restart within the same minute does not start the time again; a run
// still held is watched until it ends; a run cut off is resumed once; a run
// that completed meanwhile is recorded as ended.
func TestRestartNeitherMissesNorDoubles(t *testing.T) {
	for _, after := range []string{"held", "cut off", "complete"} {
		t.Run(after, func(t *testing.T) {
			dir := t.TempDir()
			clk := clock.NewFake(start)
			w := newWorld()
			p := pipe(t, "0 2 * * *", pipeline.CatchupLatest, 10, pipeline.OverlapSkip)
			s := open(t, dir, clk, w, p)
			clk.Advance(14 * time.Hour)
			s.Tick()
			s.Close() // serve dies; the child lives on
			switch after {
			case "held":
				w.held["nightly-2026-11-02"] = true
			case "complete":
				w.complete["nightly-2026-11-02"] = true
			}
			clk.Advance(10 * time.Second)
			s = open(t, dir, clk, w, p)
			defer s.Close()
			s.Tick()
			want := "tracked\nstarted nightly-2026-11-02 schedule"
			switch after {
			case "held":
				w.held["nightly-2026-11-02"] = false
				s.Tick()
				want += "\nexited nightly-2026-11-02"
			case "cut off":
				want += "\nstarted nightly-2026-11-02 resume"
			case "complete":
				want += "\nexited nightly-2026-11-02"
			}
			s.Tick()
			if got := events(t, dir); got != want {
				t.Errorf("schedule log:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

// TestBackfill queues a run per date and runs them one at a time.
func TestBackfill(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(start)
	w := newWorld()
	p := pipe(t, "0 2 * * *", pipeline.CatchupLatest, 10, pipeline.OverlapSkip)
	s := open(t, dir, clk, w, p)
	defer s.Close()
	if err := s.Backfill(p, []string{"2026-10-01", "2026-10-02"}, "ann"); err != nil {
		t.Fatal(err)
	}
	s.Tick()
	w.finish(t, s, "nightly-2026-10-01", 0)
	s.Tick()
	if got, want := w.startedIDs(), "nightly-2026-10-01/backfill nightly-2026-10-02/backfill"; got != want {
		t.Errorf("started %q, want %q", got, want)
	}
}

// TestLogDamage: a torn tail is cut and kept aside; damage followed by a
// good line is refused; a second serve cannot take the log.
func TestLogDamage(t *testing.T) {
	dir := t.TempDir()
	clk := clock.NewFake(start)
	w := newWorld()
	p := pipe(t, "0 2 * * *", pipeline.CatchupLatest, 10, pipeline.OverlapSkip)
	s := open(t, dir, clk, w, p)
	if _, _, err := OpenLog(LogName(dir), clk.Now); !errors.As(err, new(*LockedError)) {
		t.Errorf("second OpenLog = %v, want a *LockedError", err)
	}
	s.Close()
	path := LogName(dir)
	good, _ := os.ReadFile(path)
	os.WriteFile(path, append(good, `{"seq":2,"times`...), 0o644)
	s = open(t, dir, clk, w, p)
	s.Close()
	if side, _ := filepath.Glob(path + ".torn-*"); len(side) != 1 {
		t.Errorf("side files %v, want one", side)
	}
	if got, _ := os.ReadFile(path); string(got) != string(good) {
		t.Errorf("log after repair:\n%s\nwant:\n%s", got, good)
	}
	os.WriteFile(path, append([]byte("garbage\n"), good...), 0o644)
	if _, err := New(Options{StateDir: dir, Clock: clk, Launch: w.launch}); !errors.As(err, new(*CorruptError)) {
		t.Errorf("New over a damaged log = %v, want a *CorruptError", err)
	}
}
