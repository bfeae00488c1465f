package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"apollo/engine/cache"
	"apollo/engine/executor"
	"apollo/engine/markers"
	"apollo/engine/pipeline"
	"apollo/engine/progress"
	"apollo/engine/statedir"
	"apollo/engine/textfmt"
	"apollo/engine/usage"
	"apollo/eventlog"
	"apollo/luart"
)

// checkStepFlags checks the flags that name steps: --resume-from, --only,
// --until. They name steps of the pipeline, and one at most is given.
func checkStepFlags(p *pipeline.Pipeline, ro RunOptions) error {
	given := 0
	for _, f := range []struct{ flag, id string }{{"--resume-from", ro.ResumeFrom}, {"--only", ro.Only}, {"--until", ro.Until}} {
		if f.id == "" {
			continue
		}
		given++
		if p.Step(f.id) != nil {
			continue
		}
		ids := make([]string, len(p.Steps))
		for i, s := range p.Steps {
			ids[i] = s.ID
		}
		msg := fmt.Sprintf("%s %q: no such step in %s", f.flag, f.id, p.Path)
		if s := pipeline.Suggest(f.id, ids); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return &usage.Error{Msg: msg}
	}
	if given > 1 {
		return usage.Errorf("--resume-from, --only and --until do not go together: give one")
	}
	return nil
}

// task is a pipeline bound to one task id: rendered, with its files named.
type task struct {
	p        *pipeline.Pipeline
	id       string
	vars     map[string]string
	steps    []*renderedStep
	dir      statedir.Dir
	parallel int
	// children maps the child task id of each run: step to the step
	// (checkChildID); a foreach's instances made as it runs join it.
	children map[string]string
	// file is the pipeline's file as a log binds it (pipelineFile).
	file string
}

// prepare loads and renders a pipeline for a run, plan or graph. Nothing is
// written.
func (e *Engine) prepare(path string, ro RunOptions) (*task, error) {
	p, err := pipeline.Load(path, e.loadOptions(ro.Vars))
	if err != nil {
		return nil, err
	}
	overrides := p.RunVars(ro.inherited, ro.Vars)
	if date := e.resumedTaskDate(p, ro, overrides); date != "" {
		with := make(map[string]string, len(overrides)+1) // maps.Clone(nil) would be nil
		maps.Copy(with, overrides)
		with["task_date"] = date
		overrides = with
	}
	vars, err := taskVars(p, overrides, ro.TaskID, e.opts.StateDir, e.opts.Clock.Now())
	if err != nil {
		return nil, &usage.Error{Msg: err.Error()}
	}
	if ro.log == "" { // a task the user names, not a sub-pipeline's
		if err := statedir.ValidUserTaskID(vars["task_id"]); err != nil {
			return nil, &usage.Error{Msg: err.Error()}
		}
	}
	addSecretVars(p, vars, ro.secretVars)
	if p, err = p.Expand(vars); err != nil {
		return nil, err
	}
	if err := checkStepFlags(p, ro); err != nil {
		return nil, err
	}
	steps, err := renderSteps(p, vars)
	if err != nil {
		return nil, err
	}
	if err := e.pinLuaFiles(p, steps); err != nil {
		return nil, err
	}
	children, err := pinRunFiles(p, steps, vars["task_id"])
	if err != nil {
		return nil, err
	}
	return &task{p: p, id: vars["task_id"], vars: vars, steps: steps, children: children,
		dir: statedir.Dir{Root: e.opts.StateDir}, parallel: e.parallelism(p, ro.Parallel), file: pipelineFile(p)}, nil
}

// Run runs (or resumes) the task of the pipeline at path. It returns nil
// when the task is complete, and otherwise one of *pipeline.Error (joined),
// *usage.Error, *ChangedError, *eventlog.LockedError, *TaskFailedError,
// *InterruptedError, or an error of the log or the file system.
func (e *Engine) Run(ctx context.Context, path string, ro RunOptions) error {
	t, err := e.prepare(path, ro)
	if err != nil {
		return err
	}
	if ro.DryRun {
		return e.dryRun(t, ro)
	}
	if ro.Hub.URLs != "" && ro.Parallel == 0 && t.p.Parallelism == 0 {
		t.parallel = hubParallelism(len(t.steps)) // the workers' slots bound what runs
	}
	if ro.Hub.URLs == "" {
		e.warmLua(t.steps)
	}
	if err := eventlog.MkdirAll(e.fs(), t.dir.Logs()); err != nil {
		if ReadOnly(err) {
			return e.runReadOnly(t, ro, err)
		}
		return fmt.Errorf("create state directory: %w", err)
	}
	lock, err := eventlog.LockTask(t.dir.Lock(t.id))
	if err != nil {
		if ReadOnly(err) {
			return e.runReadOnly(t, ro, err)
		}
		return err
	}
	defer lock.Unlock()

	r := &taskRun{e: e, t: t, ro: ro, started: e.opts.Clock.Now(), lock: lock, store: cache.New(t.dir.Root, e.opts.FS)}
	defer r.stopHub()
	if err := r.connectHub(ctx); err != nil {
		return err
	}
	if err := r.takeLogFromHub(ctx); err != nil {
		return err
	}
	err = r.execute(ctx)
	r.indexTask(runStatus(err))
	return err
}

// taskRun is one invocation of apollo run on a task.
type taskRun struct {
	e       *Engine
	t       *task
	ro      RunOptions
	started time.Time
	lock    *eventlog.TaskLock // the task's, held: every append checks it is still ours

	sc scope // what this invocation is asked to run

	// failed are the steps of steps: that failed, with their errors, once
	// every one has settled: what on_failure and finally handlers are told.
	failed []executor.FailedStep

	// secrets are the pipeline's, read when the run starts; mask masks them
	// and the secret vars in everything the run writes or prints.
	secrets map[string]string
	mask    *textfmt.Masker

	whenOnce sync.Once
	whenRT   *luart.Runtime // for the steps' when: conditions

	w       *eventlog.Writer
	state   *eventlog.State // the snapshotter's, which the writer's callbacks change: read it before the steps start
	logPath string
	created bool // this invocation created the log (with its TASK_START)
	rep     progress.Reporter

	nodes []*node
	byID  map[string]*node
	// byIDMu guards byID, which a foreach expansion extends while other
	// steps read it from their goroutines.
	byIDMu sync.RWMutex

	markers *markers.Book // the task's markers, shared by its steps

	snap        *snapshotter
	snapIgnored string // why a snapshot did not match the log, "" if it did or there was none

	dirsMu   sync.Mutex
	dirsMade map[string]struct{} // folders makeDirs created in this run

	baseEnv []string // apollo's environment, which every attempt's starts from
	absLog  string   // the log's absolute path, for attempt tags

	hub *hubRun // the hub's side of a run with --hub (remote_run.go), or nil

	store *cache.Store // the state folder's cache of step results

	trace *runTrace // its spans (tracing.go), nil with tracing off

	movedFrom string // the pipeline file the task's log was bound to, when --accept-changes takes this one for it moved

	notes *notifier // the run's notifications (notify.go), nil when it has none
}

// node is a step during a run. Only the scheduler goroutine touches it,
// except while its step goroutine runs it.
type node struct {
	rs       *renderedStep
	idx      int
	children []*node
	deps     []*node
	waiting  int // dependencies not yet satisfied
	plan     PlanStep

	retry    int  // the next attempt's number
	attempts int  // attempts in this invocation
	dirty    bool // the previous attempt was cut off by a crash
	// abandoned: the previous attempt was cut off, then the step skipped
	// by an intervention; what it left running is ended, nothing more.
	abandoned bool
	unclean   bool // the previous attempt failed: clean up before the next
	prevPGID  int
	prevToken string
	recovered int    // recoveries (cleanups) of its attempts in a row, for the crash-loop guard
	final     string // the step's state at the end of this invocation
	blocked   bool
	started   bool
	lastErr   string
	outDigest string
	output    json.RawMessage
	// outputKept says output was read back from the log, where secrets
	// are ***: a secret it held is lost (lostSecret).
	outputKept bool
	left       bool       // outside --only or --until: not run
	rerunOK    bool       // its last attempt succeeded: it runs again after a reset or resume_from
	childLog   string     // a run: step's: the file name of its latest attempt's child log
	refused    error      // why its attempts fail without running (a child task id another step has)
	holding    bool       // it holds its resources (the scheduler's)
	warm       *warmShell // the shell of the next attempt, started ahead, or nil
	// warmedChild is set (by the scheduler) once warmUp started a child's
	// shell for this step's end.
	warmedChild bool
}

func (n *node) id() string { return n.rs.step.ID }

// settle records how this invocation ended n: d's status and error.
func (n *node) settle(d nodeDone) {
	n.final = d.status
	if d.err != nil {
		n.lastErr = d.err.Error()
	}
}

// satisfies reports whether n's state lets its dependents run.
func (n *node) satisfies() bool {
	switch n.final {
	case eventlog.Success, eventlog.Skipped:
		return true
	case eventlog.Failed:
		return n.rs.step.Optional
	}
	return false
}

func (r *taskRun) execute(ctx context.Context) (err error) {
	t := r.t
	if r.secrets, err = readSecrets(ctx, t.p, r.e.opts.Workdir); err != nil {
		return err
	}
	r.mask = masker(t, r.secrets)
	r.prepareTrace(ctx)
	done, err := r.open()
	if err != nil || done {
		return err
	}
	defer r.w.Close()
	if err := checkOnly(t.p, r.ro, r.state); err != nil {
		return err
	}
	r.startNotify() // from the replayed state, before anything is appended
	if r.state.Complete() && r.ro.ResumeFrom == "" && r.ro.Only == "" {
		r.sayComplete()
		r.resendNotify() // what a crash cut off is sent still
		r.finishNotify()
		return nil
	}
	resumeFrom, err := r.begin()
	if err != nil {
		return err
	}
	ctx = r.startInvocation(ctx)
	defer func() { r.endInvocation(err) }()
	r.resendNotify()
	defer r.finishNotify() // before the log closes
	r.startSLA()
	sc := scopeOf(t.p, r.ro, resumeFrom)
	if err := r.recordSelection(sc); err != nil {
		return err
	}
	r.sc = sc
	if err := r.startHub(ctx); err != nil {
		return err
	}
	// The plan and the attempts in flight are read from one state: an end
	// taken in between would leave its node planned to run again.
	release := r.holdIngest()
	err = r.buildNodes(sc)
	if r.ro.Hub.afterPlan != nil {
		r.ro.Hub.afterPlan()
	}
	open := r.inFlight()
	release()
	if err != nil {
		return err
	}
	if err := r.adoptInFlight(ctx, open); err != nil {
		return err
	}
	err = r.runSteps(ctx)
	if r.w.Err() == nil {
		r.snap.write()
	}
	return err
}

// open opens the task's log — its latest, or a new one that inherits the
// markers of the task's earlier runs — and replays it. done says there is
// nothing to run: the task is complete in the archive.
func (r *taskRun) open() (done bool, err error) {
	logPath, err := r.t.dir.LatestLog(r.t.id)
	if err != nil {
		return false, err
	}
	fresh := r.ro.Fresh
	if r.ro.log != "" {
		// A sub-pipeline's task: the log its parent's attempt names.
		_, err := os.Stat(r.ro.log)
		if fresh = err != nil; !fresh {
			logPath = r.ro.log
		}
	}
	var inherited map[string]*eventlog.MarkerInfo
	var from string
	if logPath == "" || fresh {
		if logPath == "" && !fresh {
			if done, err := r.completeInArchive(); done || err != nil {
				return true, err
			}
		}
		if inherited, from, err = r.earlierMarkers(logPath); err != nil {
			return false, err
		}
	}
	if err := r.openLog(logPath, logPath == "" || fresh); err != nil {
		return false, err
	}
	if logPath == "" && r.ro.TaskID == "" && r.ro.log == "" {
		r.noteUnfinished()
	}
	if !r.created {
		// The log it resumes, or takes for complete, is its pipeline's:
		// checked before anything is appended to it.
		if _, err := r.claim(r.state.Start, true); err != nil {
			r.w.Close()
			return false, err
		}
	}
	if err := r.inheritMarkers(inherited, from); err != nil {
		r.w.Close()
		return false, err
	}
	return false, nil
}

// claim checks that a log of the task whose latest TASK_START is start is
// this pipeline's (claim, owner.go), and keeps a move --accept-changes
// accepts, for begin to record. It reports whether the log counts: false
// for a sub-pipeline's earlier log of another pipeline, passed over.
func (r *taskRun) claim(start *eventlog.StartInfo, resumed bool) (bool, error) {
	own, err := claim(r.t, start, resumed, r.ro.log != "", r.ro.AcceptChanges)
	if err != nil {
		return false, err
	}
	if own.movedFrom != "" {
		r.movedFrom = own.movedFrom
	}
	return own.mine, nil
}

// sayComplete tells the user the task is complete, naming the steps edited
// since they succeeded: a user who edited a step and ran again expects it
// to run.
func (r *taskRun) sayComplete() {
	fmt.Fprintf(r.e.opts.Stdout, "task %s is already complete (log %s); nothing to do.\n", r.t.id, r.logPath)
	if lines := completeChanges(r.t.p, r.changedSteps()); len(lines) > 0 {
		fmt.Fprint(r.e.opts.Stdout, strings.Join(lines, "\n")+"\n")
		return
	}
	fmt.Fprintf(r.e.opts.Stdout, "Use --resume-from STEP to run part of it again, or --fresh to start a new run.\n")
}

// begin records this invocation in the log — its TASK_START, the changes
// it accepts, the resume_from it applies, a snapshot it could not use — and
// returns the step it resumes from. Changed steps without
// --accept-changes are a *ChangedError.
func (r *taskRun) begin() (resumeFrom string, err error) {
	changed := r.changedSteps()
	gone, remote := r.goneDirty()
	if (len(changed) > 0 || len(gone) > 0) && !r.ro.AcceptChanges {
		return "", &ChangedError{TaskID: r.t.id, Steps: changed, Gone: gone}
	}
	if len(remote) > 0 {
		return "", &ChangedError{TaskID: r.t.id, Gone: remote, Remote: true}
	}
	if !r.created {
		// A new log was created holding its TASK_START; a resumed one gets
		// a TASK_START for this invocation, in the task's trace.
		r.resumeTrace(r.state.Start)
		if err := r.w.AppendDurable(r.taskStart()); err != nil {
			return "", err
		}
	}
	if r.movedFrom != "" {
		if err := r.warn(nil, fmt.Sprintf("pipeline file moved from %s to %s (--accept-changes)", r.movedFrom, r.t.file)); err != nil {
			return "", err
		}
	}
	if len(changed) > 0 {
		if err := r.warn(&eventlog.Intervention{Action: eventlog.ActionAcceptChanges, Steps: changed,
			Why: "--accept-changes", By: "apollo run"},
			fmt.Sprintf("step(s) %s changed since they succeeded; their results are kept (--accept-changes)",
				strings.Join(changed, ", "))); err != nil {
			return "", err
		}
	}
	if err := r.leaveGone(gone); err != nil {
		return "", err
	}
	if resumeFrom, err = r.applyResumeFrom(); err != nil {
		return "", err
	}
	if r.snapIgnored != "" {
		if err := r.warn(nil, "snapshot ignored, the whole log was replayed: "+r.snapIgnored); err != nil {
			return "", err
		}
	}
	return resumeFrom, nil
}

// openLog opens the task's log latest, or creates a new one (for a new
// task, --fresh, or a sub-pipeline's new log), and replays it.
func (r *taskRun) openLog(latest string, create bool) error {
	t := r.t
	switch {
	case create && r.ro.log != "":
		latest = r.ro.log
	case create:
		start := r.started.Unix()
		if latest != "" {
			if logs, _ := t.dir.TaskLogs(t.id); len(logs) > 0 && logs[len(logs)-1].Start >= start {
				start = logs[len(logs)-1].Start + 1 // names must stay unique and ordered
			}
		}
		latest = t.dir.Log(t.id, start)
	}
	r.snap = newSnapshotter(t.dir.Snapshot(t.id), latest, t.id, r.e.opts.FS, r.e.opts.Stderr, r.e.opts.Crash)
	r.state = r.snap.state // one replay: the snapshotter applies every record
	var after eventlog.Prefix
	if !create {
		// A snapshot that matches the log spares reading all but its tail.
		snap, err := eventlog.LoadSnapshot(t.dir.Snapshot(t.id), latest, t.id)
		if err == nil {
			r.state = r.snap.load(snap)
			after = eventlog.Prefix{Offset: snap.Offset, Seq: snap.Seq, Version: snap.LogVersion}
		}
		if err != nil && !errors.Is(err, eventlog.ErrNoSnapshot) {
			r.snap = newSnapshotter(t.dir.Snapshot(t.id), latest, t.id, r.e.opts.FS, r.e.opts.Stderr, r.e.opts.Crash)
			r.state, after, r.snapIgnored = r.snap.state, eventlog.Prefix{}, err.Error()
		}
	}
	r.markers = markers.New(maps.Clone(r.state.Markers))
	t.dir.RemoveUnfinished(t.id) // under the task's lock: no one else writes them
	var first *eventlog.Record
	if create {
		first = r.taskStart()
	}
	pub := r.hubPublish(latest)
	w, err := eventlog.Open(latest, eventlog.WriterOptions{
		Lock:   r.lock,
		TaskID: t.id,
		// Each record's durability is chosen by the engine: the step's
		// setting for its records, always for task-level ones.
		Durability: eventlog.Batch,
		Create:     create,
		First:      first,
		FS:         r.e.opts.FS,
		Now:        r.e.opts.Clock.Now,
		// Another process appended (apollo script, an isolated Lua
		// step): its markers count at once; interventions wait for the
		// next run, which replays them.
		OnForeign: func(rec *eventlog.Record) {
			r.markers.Observe(rec)
			r.snap.foreign(rec)
		},
		OnAppend: r.snap.appended,
		// With a hub, each record is the hub's first (remote_log.go),
		// and durable there: the file waits for no fsync per record.
		Publish:        pub,
		PublishDurable: pub != nil,
		PublishLinger:  r.hubLinger(),
		After:          after,
		Crash:          r.e.opts.Crash,
	}, func(rec *eventlog.Record) error {
		r.markers.Observe(rec)
		r.snap.replayed(rec)
		return nil
	})
	if err != nil {
		return err
	}
	r.snap.opened(w)
	r.w, r.logPath, r.created = w, latest, create
	r.absLog = latest
	if abs, err := filepath.Abs(latest); err == nil {
		r.absLog = abs // attemptToken's filepath.Abs then has nothing to look up
	}
	r.baseEnv = os.Environ()
	r.markers.Attach(w, r.e.opts.Crash)
	return nil
}

// changedSteps lists succeeded steps whose definition differs from the one
// recorded by the latest TASK_START, unless --resume-from reruns them.
func (r *taskRun) changedSteps() []string {
	if r.state.Start == nil {
		return nil
	}
	recorded := map[string]string{}
	for _, si := range r.state.Start.Steps {
		recorded[si.ID] = si.DefinitionDigest
	}
	rerun := scopeOf(r.t.p, r.ro, r.ro.ResumeFrom).rerun
	var changed []string
	for _, rs := range r.t.steps {
		id := rs.step.ID
		st, ok := r.state.Steps[id]
		if !ok || st.Status != eventlog.Success || rerun[id] {
			continue
		}
		if d, ok := recorded[id]; ok && d != rs.defDigest && d != withoutFiles(rs) {
			changed = append(changed, id)
		}
	}
	return changed
}

// goneDirty lists, in the log's order, the steps whose latest attempt a
// crash cut off (dirty) and which the pipeline no longer has: renamed or
// removed since. No run of the pipeline would end what they left running
// or run their cleanup. remote are those of them dispatched to a hub.
func (r *taskRun) goneDirty() (gone, remote []string) {
	for _, id := range r.state.Order {
		st := r.state.Steps[id]
		if st == nil || !st.Dirty || r.hasStep(id) {
			continue
		}
		gone = append(gone, id)
		if st.Remote {
			remote = append(remote, id)
		}
	}
	return gone, remote
}

// hasStep reports whether the pipeline has step id: one of its steps
// (literal foreach and matrix instances, "grid[s,a]", are steps of the
// expanded pipeline), or an instance ("each[a]") of one of its steps that
// expand as they run (foreach: {output: ...}).
func (r *taskRun) hasStep(id string) bool {
	if r.t.p.Step(id) != nil {
		return true
	}
	template, _, instance := strings.Cut(id, "[")
	s := r.t.p.Step(template)
	return s != nil && instance && s.Foreach != nil
}

// leaveGone ends, under --accept-changes, what the cut-off attempts of the
// steps gone from the pipeline left running, and records each with a
// CLEANUP (dirty, no hook: the pipeline no longer says what it was) and
// the change with an accept_changes WARNING.
func (r *taskRun) leaveGone(gone []string) error {
	if len(gone) == 0 {
		return nil
	}
	for _, id := range gone {
		st := r.state.Steps[id]
		ended := executor.EndLeftovers(executor.AttemptToken(r.absLog, id, st.RetryCount), st.PGID, r.e.opts.KillGrace)
		msg := fmt.Sprintf("attempt %d was cut off by a crash; the pipeline no longer has this step: ", st.RetryCount)
		if ended > 0 {
			msg += fmt.Sprintf("ended %d process(es) left running by the cut-off attempt; ", ended)
		}
		msg += "no cleanup hook ran (--accept-changes)"
		rec := &eventlog.Record{EventType: eventlog.Cleanup, StepID: id, Status: eventlog.Pending,
			RetryCount: st.RetryCount, Dirty: true, Message: msg}
		if err := r.w.AppendDurable(rec); err != nil {
			return err
		}
		fmt.Fprintf(r.e.opts.Stderr, "apollo: step %s: %s\n", id, msg)
	}
	return r.warn(&eventlog.Intervention{Action: eventlog.ActionAcceptChanges, Steps: gone, Why: "--accept-changes", By: "apollo run"},
		fmt.Sprintf("step(s) %s, cut off by a crash, are no longer in the pipeline; what they left running was ended "+
			"and their cleanup did not run (--accept-changes)", strings.Join(gone, ", ")))
}

// completeChanges says, for a complete task, which of its steps changed
// since they succeeded and how to rerun them: a line for each changed step
// that no other changed step is an ancestor of, naming the changed steps
// --resume-from it reruns.
func completeChanges(p *pipeline.Pipeline, changed []string) []string {
	if len(changed) == 0 {
		return nil
	}
	desc := make(map[string]map[string]bool, len(changed))
	for _, id := range changed {
		desc[id] = p.Descendants(id)
	}
	var lines []string
	for _, id := range changed {
		root := true
		for _, other := range changed {
			if other != id && desc[other][id] {
				root = false
				break
			}
		}
		if !root {
			continue
		}
		var group []string
		for _, c := range changed {
			if desc[id][c] {
				group = append(group, c)
			}
		}
		if len(group) == 1 {
			lines = append(lines, fmt.Sprintf("task complete; step %s changed since: run with --resume-from %s to rerun it", id, id))
		} else {
			lines = append(lines, fmt.Sprintf("task complete; steps %s changed since: run with --resume-from %s to rerun them",
				nameList(group), id))
		}
	}
	return lines
}

// withoutFiles is a step's definition digest as it was before the content
// of its Lua files was part of it: a log recorded then is read as it was
// meant, the files unknown to it.
func withoutFiles(rs *renderedStep) string {
	if rs.filesDigest == "" {
		return rs.defDigest
	}
	old := *rs
	old.filesDigest = ""
	return definitionDigest(&old)
}

func (r *taskRun) taskStart() *eventlog.Record {
	t := r.t
	host, _ := os.Hostname()
	nonce := make([]byte, 8)
	rand.Read(nonce)
	info := &eventlog.StartInfo{
		Version:        eventlog.Version,
		TaskName:       t.p.TaskName,
		Pipeline:       t.p.Path,
		PipelineFile:   t.file,
		PipelineDigest: sha256Hex(t.p.Source),
		Vars:           shownVars(t),
		PID:            os.Getpid(),
		Host:           host,
		RunNonce:       hex.EncodeToString(nonce),
		Invocation:     r.state.Invocations + 1,
		Durability:     t.p.Durability,
		Parallelism:    t.parallel,
		ApolloVersion:  r.e.opts.Version,
	}
	r.traceStart(info)
	for _, rs := range t.steps {
		deps := rs.step.DependsOn
		if deps == nil {
			deps = []string{}
		}
		si := eventlog.StepInfo{ID: rs.step.ID, DependsOn: deps,
			Optional: rs.step.Optional, DefinitionDigest: rs.defDigest, HasCleanup: rs.step.HasCleanup(), Handler: rs.step.Handler}
		if rs.step.Run != "" && rs.step.Foreach == nil { // a foreach's instances run it
			si.Child = pipeline.ChildTaskID(t.id, rs.step.ID)
		}
		info.Steps = append(info.Steps, si)
	}
	return &eventlog.Record{EventType: eventlog.TaskStart, Status: eventlog.Running, Start: info}
}

// warn appends a durable WARNING.
func (r *taskRun) warn(iv *eventlog.Intervention, msg string) error {
	rec := &eventlog.Record{EventType: eventlog.Warning, Status: eventlog.Running, Message: msg, Intervention: iv}
	return r.w.AppendDurable(rec)
}

// applyResumeFrom records a resume_from intervention when one is asked for:
// by the flag (every time it is given) or by the file (once per task run).
func (r *taskRun) applyResumeFrom() (string, error) {
	from := fileResumeFrom(r.t.p, r.ro, r.state)
	if from == "" {
		return "", nil
	}
	by := "--resume-from"
	if r.ro.ResumeFrom == "" {
		by = "resume_from in " + r.t.p.Path
	}
	set := r.t.p.Descendants(from)
	steps := []string{from}
	for _, i := range r.t.p.TopoOrder() {
		if id := r.t.p.Steps[i].ID; set[id] && id != from {
			steps = append(steps, id)
		}
	}
	msg := fmt.Sprintf("manual intervention: resume from %q (%s): %s run again; every other step not yet SUCCESS is skipped",
		from, by, strings.Join(steps, ", "))
	iv := &eventlog.Intervention{Action: eventlog.ActionResumeFrom, Steps: steps, Why: by, By: "apollo run"}
	if err := r.warn(iv, msg); err != nil {
		return "", err
	}
	return from, nil
}

// recordSelection records --only or --until as a manual intervention.
func (r *taskRun) recordSelection(sc scope) error {
	if sc.within == nil {
		return nil
	}
	steps := make([]string, 0, len(sc.within))
	for _, i := range r.t.p.TopoOrder() {
		if id := r.t.p.Steps[i].ID; sc.within[id] {
			steps = append(steps, id)
		}
	}
	msg := fmt.Sprintf("manual intervention: %s: only %s may run in this invocation; every other step is left as it is",
		sc.why, strings.Join(steps, ", "))
	return r.warn(&eventlog.Intervention{Action: eventlog.ActionOnly, Steps: steps, Why: sc.why, By: "apollo run"}, msg)
}

// failedSteps lists the failed steps of steps: (a required step that
// failed, or one it blocked, makes the task fail: those come first), with
// their errors.
func (r *taskRun) failedSteps() []executor.FailedStep {
	var required, optional []executor.FailedStep
	for _, n := range r.nodes {
		s := n.rs.step
		switch {
		case s.Handler != "":
		case n.final == eventlog.Failed && !s.Optional:
			required = append(required, executor.FailedStep{ID: s.ID, Error: n.lastErr})
		case n.blocked && !n.left:
			required = append(required, executor.FailedStep{ID: s.ID, Error: "blocked: a step it depends on failed"})
		case n.final == eventlog.Failed:
			optional = append(optional, executor.FailedStep{ID: s.ID, Error: n.lastErr, Optional: true})
		}
	}
	if len(required) == 0 {
		return nil // the task did not fail: failed optional steps are no failure
	}
	return append(required, optional...)
}

// node returns the node of step (or instance) id.
func (r *taskRun) node(id string) *node {
	r.byIDMu.RLock()
	defer r.byIDMu.RUnlock()
	return r.byID[id]
}

// warmLua starts a Lua process ahead when steps has a Lua step that runs in
// one (the default isolation), so that it starts while the run opens its
// log rather than when the first Lua step is ready.
func (e *Engine) warmLua(steps []*renderedStep) {
	w, ok := e.opts.Executors["lua"].(interface{ Warm() })
	if !ok {
		return
	}
	for _, r := range steps {
		s := r.step
		lua := s.Lua != "" || s.Script != "" || s.Uses != "" || s.CleanupLua != "" || s.CleanupScript != ""
		if lua && s.Isolation != "inprocess" && s.Isolation != "process" {
			w.Warm()
			return
		}
	}
}
