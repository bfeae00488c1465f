package cron

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"apollo/engine/clock"
	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// Pipe is a pipeline that apollo serve knows, with its schedule (nil: run
// only on demand).
type Pipe struct {
	// Rel names it in the schedule log: its path under the pipelines folder.
	Rel string
	// Path is the file, absolute.
	Path     string
	TaskName string
	Schedule *pipeline.Schedule
	// Triggers start runs besides the schedule (triggers.go).
	Triggers []pipeline.Trigger
}

// Job is one apollo run to start.
type Job struct {
	Pipe      Pipe
	TaskID    string
	TaskDate  string
	StateDir  string            // "" means the scheduler's
	Vars      map[string]string // more --var values (a resume repeats the run's own)
	Fresh     bool
	Trigger   string
	By        string
	Scheduled time.Time // zero for runs not on a schedule
	// Key, when set, is recorded on the started entry: what a client's
	// Idempotency-Key decided (APIKey), so that a retried request finds
	// its run after a restart of serve.
	Key string
}

// Process is a started child apollo run.
type Process struct {
	PID int
	// Wait waits for the process to end and returns its exit code (-1 when
	// a signal killed it).
	Wait func() int
}

// Launcher starts the apollo run of job, its stdout and stderr going to
// the file output, in the state folder stateDir.
type Launcher func(job Job, stateDir, output string) (*Process, error)

// Options configure a Scheduler.
type Options struct {
	StateDir string
	Clock    clock.Clock
	Launch   Launcher
	// Complete reports whether a task of a state folder is complete; nil
	// reads its newest log.
	Complete func(stateDir, taskID string) bool
	// Holder reports the runner holding a task; nil reads its lock.
	Holder func(stateDir, taskID string) (pid int, held bool)
	// Grace is how late a scheduled time may be handled and still count as
	// on time rather than missed (default 1 minute).
	Grace time.Duration
	// Logf receives what the scheduler does, for serve's stderr.
	Logf func(format string, args ...any)
	// Shared, when set, keeps the schedule log in the hub and says which
	// of the serves sharing it leads (shared.go); StateDir then holds only
	// the runs' output. Me names this serve in the log (host and pid).
	Shared Shared
	Me     string
}

// Scheduler runs pipelines on their schedules and starts runs on demand,
// recording everything in the schedule log.
type Scheduler struct {
	opts Options
	log  journal

	mu      sync.Mutex
	pipes   map[string]*pipeState
	cursors map[string]time.Time // by Rel: the last scheduled time handled
	queues  map[string][]*Entry  // by Rel: queued entries, oldest first
	active  map[int64]*active    // by the seq of their started entry
	orphans []*Entry             // started entries without an exit, from before a restart
	recent  []*Entry             // the last entries, newest last, for pages
	lag     map[string]time.Duration
	wake    chan struct{}
	wg      sync.WaitGroup
	fired   map[string]bool   // trigger decisions taken, by pipeline and Key (triggers.go)
	keyed   map[string]*Entry // runs started through the API with an Idempotency-Key, by its id (APIKey)
	lead    leadState         // with Options.Shared
}

type pipeState struct{ pipe Pipe }

// active is a run the scheduler started; proc is nil for one it found
// running when it started (it waits for the task's lock to be let go).
type active struct {
	entry *Entry
	proc  *Process
}

// keepRecent is how many entries Recent keeps.
const keepRecent = 2000

// New opens the schedule log of o.StateDir and takes up what it says: the
// last time each schedule was handled, the queue, and the runs that had
// not ended when the last serve stopped.
func New(o Options) (*Scheduler, error) {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.Grace <= 0 {
		o.Grace = time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.Complete == nil {
		o.Complete = TaskComplete
	}
	if o.Holder == nil {
		o.Holder = func(stateDir, taskID string) (int, bool) {
			return eventlog.Holder(statedir.Dir{Root: stateDir}.Lock(taskID))
		}
	}
	s := &Scheduler{opts: o, pipes: map[string]*pipeState{}, wake: make(chan struct{}, 1)}
	s.reset()
	if o.Shared != nil {
		s.log = &sharedLog{sh: o.Shared, now: o.Clock.Now}
		return s, nil // it reads the log when it takes the lead
	}
	l, entries, err := OpenLog(LogName(o.StateDir), o.Clock.Now)
	if err != nil {
		return nil, err
	}
	s.log = l
	s.replay(entries)
	return s, nil
}

// reset forgets what the log said: the state of a serve that reads it
// anew.
func (s *Scheduler) reset() {
	s.cursors, s.queues, s.active = map[string]time.Time{}, map[string][]*Entry{}, map[int64]*active{}
	s.orphans, s.recent, s.lag = nil, nil, map[string]time.Duration{}
	s.fired = map[string]bool{} // trigger decisions taken (triggers.go)
	s.keyed = map[string]*Entry{}
}

// replay takes up what the log's entries say: the last time each schedule
// was handled, the queue, and the runs that had not ended when the last
// serve stopped.
func (s *Scheduler) replay(entries []*Entry) {
	started := map[int64]*Entry{}
	for _, e := range entries {
		s.noteFired(e)
		s.remember(e)
		s.advance(e)
		switch e.Event {
		case EventStarted:
			started[e.Seq] = e
			delete(started, e.Ref) // a resume carries its run on
			s.dequeue(e.Pipeline, e.Ref)
		case EventSkipped:
			s.dequeue(e.Pipeline, e.Ref)
		case EventQueued:
			s.queues[e.Pipeline] = append(s.queues[e.Pipeline], e)
		case EventExited:
			delete(started, e.Ref)
		}
	}
	for _, e := range started {
		s.orphans = append(s.orphans, e)
	}
	slices.SortFunc(s.orphans, func(a, b *Entry) int { return int(a.Seq - b.Seq) })
}

// advance moves a pipeline's cursor past the scheduled time e handled.
func (s *Scheduler) advance(e *Entry) {
	t := e.Scheduled
	if e.Event == EventMissed {
		t = e.Until
	}
	if t == "" || (e.Trigger != "" && e.Trigger != TriggerSchedule && e.Trigger != TriggerCatchup) {
		return
	}
	if at, err := time.Parse(time.RFC3339Nano, t); err == nil && at.After(s.cursors[e.Pipeline]) {
		s.cursors[e.Pipeline] = at
	}
}

func (s *Scheduler) dequeue(rel string, seq int64) {
	if seq == 0 {
		return
	}
	s.queues[rel] = slices.DeleteFunc(s.queues[rel], func(q *Entry) bool { return q.Seq == seq })
}

func (s *Scheduler) remember(e *Entry) {
	s.recent = append(s.recent, e)
	if len(s.recent) > keepRecent+keepRecent/2 {
		s.recent = slices.Clone(s.recent[len(s.recent)-keepRecent:])
	}
}

// Close waits for nothing: children go on running (they are their own
// process groups) and the next serve takes them up. It lets the log go.
func (s *Scheduler) Close() error {
	s.resign()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.Close()
}

// SetPipes tells the scheduler the pipelines it knows now. A schedule seen
// for the first time counts from now: no catch-up of times before it.
func (s *Scheduler) SetPipes(pipes []Pipe) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pipes = map[string]*pipeState{}
	for _, p := range pipes {
		s.pipes[p.Rel] = &pipeState{pipe: p}
	}
	s.poke()
	if !s.acting() {
		return nil // the serve that leads tracks them
	}
	return s.track()
}

// track records the schedules seen for the first time; s.mu is held.
func (s *Scheduler) track() error {
	now := s.opts.Clock.Now()
	for _, rel := range slices.Sorted(maps.Keys(s.pipes)) {
		if s.pipes[rel].pipe.Schedule == nil {
			continue
		}
		if _, ok := s.cursors[rel]; !ok {
			if err := s.append(&Entry{Event: EventTracked, Pipeline: rel, Scheduled: stamp(now)}); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// append writes e to the log and remembers it; s.mu is held.
func (s *Scheduler) append(e *Entry) error {
	if !s.acting() {
		return s.notLeading()
	}
	if err := s.log.Append(e); err != nil {
		if s.opts.Shared != nil { // deposed, or the hub is gone for longer than the lease
			s.standDown(err)
		}
		return err
	}
	s.noteFired(e)
	s.remember(e)
	s.advance(e)
	return nil
}

// Run handles schedules until ctx is done: it wakes at the next scheduled
// time, when a run ends, and at least once a minute (a clock that jumps).
func (s *Scheduler) Run(ctx context.Context) {
	go s.watchFiles(ctx) // trigger_file.go; it ends with ctx
	if s.opts.Shared != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.leadLoop(ctx)
		}()
		defer func() { <-done }() // Close gives the lead up after the loop's last renewal
	}
	for {
		next := s.Tick()
		d := max(0, min(next.Sub(s.opts.Clock.Now()), time.Minute))
		t := s.opts.Clock.AfterFunc(d, s.poke)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-s.wake:
			t.Stop()
		}
	}
}

// Tick does what is due now — scheduled times, queued runs, runs found at
// start — and returns when it next has something to do.
func (s *Scheduler) Tick() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock.Now()
	next := now.Add(24 * time.Hour)
	if !s.acting() {
		return next // the lead loop pokes when this serve takes the lead
	}
	s.takeUpOrphans()
	for _, rel := range slices.Sorted(maps.Keys(s.pipes)) {
		p := s.pipes[rel].pipe
		if p.Schedule == nil {
			continue
		}
		s.due(p, now)
		if n := p.Schedule.Next(s.cursors[rel]); !n.IsZero() && n.Before(next) {
			next = n
		}
	}
	for rel := range s.queues {
		s.startQueued(rel)
	}
	for seq, a := range s.active {
		if a.proc != nil {
			continue
		}
		if _, held := s.opts.Holder(s.stateDir(a.entry), a.entry.TaskID); !held {
			s.exited(seq, nil, "its runner ended; it was running when apollo serve started")
		} else if n := now.Add(2 * time.Second); n.Before(next) {
			next = n
		}
	}
	return next
}

func (s *Scheduler) stateDir(e *Entry) string {
	if d := e.StateDir; d != "" {
		return d
	}
	return s.opts.StateDir
}

// takeUpOrphans carries on the runs started before a restart that have no
// exit: one still running is watched; one whose task is complete is
// recorded as ended; one cut off is started again, and resumes its task.
func (s *Scheduler) takeUpOrphans() {
	orphans := s.orphans
	s.orphans = nil
	for _, e := range orphans {
		dir := s.stateDir(e)
		switch _, held := s.opts.Holder(dir, e.TaskID); {
		case held:
			s.active[e.Seq] = &active{entry: e}
		case s.opts.Complete(dir, e.TaskID):
			s.exited(e.Seq, nil, "it ended while apollo serve was down; its task is complete")
		default:
			p, ok := s.pipes[e.Pipeline]
			if !ok {
				p = &pipeState{pipe: Pipe{Rel: e.Pipeline, Path: e.Pipeline}}
			}
			job := Job{Pipe: p.pipe, TaskID: e.TaskID, TaskDate: e.TaskDate, Trigger: TriggerResume, By: "apollo serve",
				StateDir: e.StateDir, Vars: e.Vars}
			s.start(job, e.Seq, "it was cut off while apollo serve was down")
		}
	}
}

// due handles the scheduled times of p up to now: those within the grace
// are on time, older ones were missed while serve was down and are run as
// the catch-up policy says.
func (s *Scheduler) due(p Pipe, now time.Time) {
	sch := p.Schedule
	from := s.cursors[p.Rel]
	var late []time.Time // the latest keep late times, oldest first
	keep := 0
	switch sch.Catchup {
	case pipeline.CatchupLatest:
		keep = 1
	case pipeline.CatchupAll:
		keep = sch.CatchupLimit
	}
	var onTime []time.Time
	var firstLate, lastMissed time.Time
	lateCount := 0
	for f := sch.Next(from); !f.IsZero() && !f.After(now); f = sch.Next(f) {
		if now.Sub(f) <= s.opts.Grace {
			onTime = append(onTime, f)
			continue
		}
		if lateCount == 0 {
			firstLate = f
		}
		lateCount++
		late = append(late, f)
		if len(late) > keep {
			lastMissed, late = late[0], late[1:]
		}
		if lateCount >= 10_000_000 { // a schedule that fired every minute for 19 years
			break
		}
	}
	if len(onTime) > 0 && sch.Catchup == pipeline.CatchupLatest && len(late) > 0 {
		lastMissed, late = late[len(late)-1], nil // the on-time run is the latest
	}
	if missed := lateCount - len(late); missed > 0 {
		s.append(&Entry{Event: EventMissed, Pipeline: p.Rel, Scheduled: stamp(firstLate), Until: stamp(lastMissed), Count: missed,
			Reason: fmt.Sprintf("apollo serve was not running; catchup: %s", sch.Catchup)})
	}
	for _, f := range late {
		id, date := TaskFor(p, f)
		s.append(&Entry{Event: EventQueued, Pipeline: p.Rel, Scheduled: stamp(f), TaskID: id, TaskDate: date, Trigger: TriggerCatchup})
		s.queues[p.Rel] = append(s.queues[p.Rel], s.recent[len(s.recent)-1])
	}
	for _, f := range onTime {
		s.fire(p, f)
	}
}

// TaskFor returns the task id and task_date of p's run scheduled at t:
// <task_name>-<date>, and -<HHMM> after it when the schedule may fire twice
// on one date.
func TaskFor(p Pipe, t time.Time) (taskID, date string) {
	date = p.Schedule.Date(t)
	taskID = p.TaskName + "-" + date
	if p.Schedule.SubDaily() {
		taskID += "T" + t.In(p.Schedule.Location()).Format("1504")
	}
	return taskID, date
}

// fire handles one on-time scheduled time of p.
func (s *Scheduler) fire(p Pipe, at time.Time) {
	id, date := TaskFor(p, at)
	base := Entry{Pipeline: p.Rel, Scheduled: stamp(at), TaskID: id, TaskDate: date, Trigger: TriggerSchedule}
	if s.opts.Complete(s.opts.StateDir, id) {
		e := base
		e.Event, e.Reason = EventSkipped, "its task is already complete"
		s.append(&e)
		return
	}
	if why := s.busy(p.Rel, id); why != "" {
		e := base
		if p.Schedule.Overlap == pipeline.OverlapQueue {
			e.Event = EventQueued
			s.append(&e)
			s.queues[p.Rel] = append(s.queues[p.Rel], &e)
			return
		}
		e.Event, e.Reason = EventSkipped, "overlap: "+why
		s.append(&e)
		return
	}
	s.lag[p.Rel] = s.opts.Clock.Now().Sub(at)
	s.start(Job{Pipe: p, TaskID: id, TaskDate: date, Trigger: TriggerSchedule, By: "schedule", Scheduled: at}, 0, "")
}

// busy says why p cannot start a run now: one of its runs goes on, runs
// wait in its queue, or a runner holds the task; "" when it can.
func (s *Scheduler) busy(rel, taskID string) string {
	for _, a := range s.active {
		if a.entry.Pipeline == rel {
			return fmt.Sprintf("run %s (started %s) is still going", a.entry.TaskID, a.entry.Timestamp)
		}
	}
	if len(s.queues[rel]) > 0 {
		return fmt.Sprintf("%d run(s) wait in its queue", len(s.queues[rel]))
	}
	if pid, held := s.opts.Holder(s.opts.StateDir, taskID); held {
		return fmt.Sprintf("apollo process %d runs task %s", pid, taskID)
	}
	return ""
}

// startQueued starts the oldest queued run of rel when none of its runs
// goes on.
func (s *Scheduler) startQueued(rel string) {
	for len(s.queues[rel]) > 0 {
		for _, a := range s.active {
			if a.entry.Pipeline == rel {
				return
			}
		}
		q := s.queues[rel][0]
		p, ok := s.pipes[rel]
		if !ok {
			return // the pipeline is gone for now; its queue waits for it
		}
		dir := s.stateDir(q)
		if s.opts.Complete(dir, q.TaskID) {
			s.queues[rel] = s.queues[rel][1:]
			s.append(&Entry{Event: EventSkipped, Pipeline: rel, Scheduled: q.Scheduled, TaskID: q.TaskID, TaskDate: q.TaskDate,
				Trigger: q.Trigger, Ref: q.Seq, Reason: "its task is already complete"})
			continue
		}
		if _, held := s.opts.Holder(dir, q.TaskID); held {
			return
		}
		s.queues[rel] = s.queues[rel][1:]
		at, _ := time.Parse(time.RFC3339Nano, q.Scheduled)
		if q.Trigger == TriggerSchedule || q.Trigger == TriggerCatchup {
			s.lag[rel] = s.opts.Clock.Now().Sub(at)
		}
		s.start(Job{Pipe: p.pipe, TaskID: q.TaskID, TaskDate: q.TaskDate, Trigger: q.Trigger, By: q.By, Fresh: q.Fresh,
			Scheduled: at, StateDir: q.StateDir, Vars: q.Vars}, q.Seq, "")
		return
	}
}

// start records a started entry durably, then starts the child; s.mu is
// held. A child that cannot start is recorded as exited at once.
func (s *Scheduler) start(job Job, ref int64, reason string) *Entry {
	out := filepath.Join("schedule", "out", strconv.FormatInt(s.log.Seq()+1, 10)+".log")
	e := &Entry{Event: EventStarted, Pipeline: job.Pipe.Rel, TaskID: job.TaskID, TaskDate: job.TaskDate, Trigger: job.Trigger,
		By: job.By, Fresh: job.Fresh, Ref: ref, Reason: reason, Output: out, Key: job.Key}
	if triggered(job.Trigger) || job.Trigger == TriggerResume {
		e.Vars = job.Vars // what a trigger gave it, for its resume
	}
	if !job.Scheduled.IsZero() {
		e.Scheduled = stamp(job.Scheduled)
	}
	if job.StateDir != s.opts.StateDir {
		e.StateDir = job.StateDir
	}
	if err := s.append(e); err != nil {
		s.opts.Logf("apollo serve: %v", err)
		return nil
	}
	dir := job.StateDir
	if dir == "" {
		dir = s.opts.StateDir
	}
	gen := s.lead.gen
	os.MkdirAll(filepath.Join(s.opts.StateDir, "schedule", "out"), 0o755)
	proc, err := s.opts.Launch(job, dir, filepath.Join(s.opts.StateDir, out))
	if err != nil {
		code := -1
		s.append(&Entry{Event: EventExited, Pipeline: e.Pipeline, TaskID: e.TaskID, Ref: e.Seq, ExitCode: &code,
			Reason: "could not start: " + err.Error()})
		return e
	}
	s.opts.Logf("apollo serve: started task %s (%s, pid %d)", job.TaskID, job.Trigger, proc.PID)
	e.PID = proc.PID
	s.active[e.Seq] = &active{entry: e, proc: proc}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		code := proc.Wait()
		s.mu.Lock()
		if s.lead.gen == gen {
			s.exited(e.Seq, &code, "")
		} else { // the serve that leads now finds it ended
			s.opts.Logf("apollo serve: task %s exited %d after this serve stopped leading the schedules", job.TaskID, code)
		}
		s.mu.Unlock()
		s.poke()
	}()
	return e
}

// exited records the end of the run started by entry seq; s.mu is held.
func (s *Scheduler) exited(seq int64, code *int, reason string) {
	a := s.active[seq]
	delete(s.active, seq)
	s.afterEnded(seq, a, code) // before the exit: a crash between them decides again, once
	e := &Entry{Event: EventExited, Ref: seq, ExitCode: code, Reason: reason}
	if a != nil {
		e.Pipeline, e.TaskID, e.PID = a.entry.Pipeline, a.entry.TaskID, a.entry.PID
	} else {
		for _, r := range s.recent {
			if r.Seq == seq {
				e.Pipeline, e.TaskID = r.Pipeline, r.TaskID
			}
		}
	}
	if err := s.append(e); err != nil {
		s.opts.Logf("apollo serve: %v", err)
	}
	if code != nil {
		s.opts.Logf("apollo serve: task %s exited %d", e.TaskID, *code)
	}
}

// Wait waits for the goroutines that wait for children (tests).
func (s *Scheduler) Wait() { s.wg.Wait() }

// StartNow starts job at once (run now, resume, retry from the page):
// there is no overlap check, but a task a runner holds is refused.
func (s *Scheduler) StartNow(job Job) (*Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeading(); err != nil {
		return nil, err
	}
	dir := job.StateDir
	if dir == "" {
		dir = s.opts.StateDir
	}
	if pid, held := s.opts.Holder(dir, job.TaskID); held {
		return nil, fmt.Errorf("task %s is already being run by apollo process %d", job.TaskID, pid)
	}
	for _, a := range s.active {
		if a.entry.TaskID == job.TaskID && s.stateDir(a.entry) == dir {
			return nil, fmt.Errorf("task %s is already being started (pid %d)", job.TaskID, a.entry.PID)
		}
	}
	e := s.start(job, 0, "")
	if e == nil {
		return nil, fmt.Errorf("the schedule log could not be written")
	}
	return e, nil
}

// Backfill queues the run of p for each date, oldest first; they start one
// at a time, after the pipeline's running one.
func (s *Scheduler) Backfill(p Pipe, dates []string, by string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.notLeading(); err != nil {
		return err
	}
	for _, d := range dates {
		e := &Entry{Event: EventQueued, Pipeline: p.Rel, TaskID: p.TaskName + "-" + d, TaskDate: d, Trigger: TriggerBackfill, By: by}
		if err := s.append(e); err != nil {
			return err
		}
		s.queues[p.Rel] = append(s.queues[p.Rel], e)
	}
	s.poke()
	return nil
}

// Status is what the pages show of a pipeline's schedule.
type Status struct {
	Pipeline string   `json:"pipeline"`
	Next     string   `json:"next,omitempty"` // the next scheduled time, RFC 3339 UTC
	Last     string   `json:"last,omitempty"` // the last one handled
	Queued   int      `json:"queued"`         // runs waiting
	Running  []string `json:"running"`        // task ids of its runs going on
	LagMS    int64    `json:"last_lag_ms"`    // how late its last scheduled run started
	Tracked  bool     `json:"tracked"`        // serve has recorded its schedule
}

// Status reports on the schedule of rel.
func (s *Scheduler) Status(p Pipe) Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Pipeline: p.Rel, Queued: len(s.queues[p.Rel]), Running: []string{}, LagMS: s.lag[p.Rel].Milliseconds()}
	cur, ok := s.cursors[p.Rel]
	st.Tracked = ok
	if ok {
		st.Last = stamp(cur)
	}
	if p.Schedule != nil {
		from := cur
		if !ok {
			from = s.opts.Clock.Now()
		}
		if n := p.Schedule.Next(from); !n.IsZero() {
			st.Next = stamp(n)
		}
	}
	for _, a := range s.active {
		if a.entry.Pipeline == p.Rel {
			st.Running = append(st.Running, a.entry.TaskID)
		}
	}
	slices.Sort(st.Running)
	return st
}

// Recent returns the last entries of the schedule log, newest first.
func (s *Scheduler) Recent(n int) []*Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	n = min(n, len(s.recent))
	out := make([]*Entry, 0, n)
	for i := len(s.recent) - 1; i >= len(s.recent)-n; i-- {
		out = append(out, s.recent[i])
	}
	return out
}

// Lags returns how late each pipeline's last scheduled run started.
func (s *Scheduler) Lags() map[string]time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Duration, len(s.lag))
	for k, v := range s.lag {
		out[k] = v
	}
	return out
}

// TaskComplete reports whether a task of a state folder is complete: its
// newest log, live or archived, ends with the task complete.
func TaskComplete(stateDir, taskID string) bool {
	if statedir.ValidTaskID(taskID) != nil {
		return false
	}
	path, _, err := statedir.Dir{Root: stateDir}.FindLog(taskID)
	if err != nil || path == "" {
		return false
	}
	st, _, err := statedir.Replay(path, taskID, nil)
	return err == nil && st.Complete()
}
