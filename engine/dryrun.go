package engine

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"apollo/engine/cache"
	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// Plan returns what apollo run would do now with the pipeline at path,
// reading the task's log without locking or writing anything.
func (e *Engine) Plan(path string, ro RunOptions) (*Plan, error) {
	t, err := e.prepare(path, ro)
	if err != nil {
		return nil, err
	}
	return e.plan(t, ro)
}

func (e *Engine) plan(t *task, ro RunOptions) (*Plan, error) {
	pl := &Plan{TaskID: t.id, Pipeline: t.p.Path, Resources: t.p.Resources}
	for _, tr := range t.p.Triggers {
		pl.Triggers = append(pl.Triggers, tr.Describe())
	}
	state, err := e.planLog(t, ro, pl)
	if err != nil {
		return nil, err
	}
	resumeFrom := fileResumeFrom(t.p, ro, state)
	pl.ResumeFrom = resumeFrom
	if err := checkOnly(t.p, ro, state); err != nil {
		return nil, err
	}
	pl.Complete = state.Complete() && ro.ResumeFrom == "" && ro.Only == ""
	sc := scopeOf(t.p, ro, resumeFrom)
	r := &taskRun{e: e, t: t, ro: ro, state: state, sc: sc}
	pl.Changed = r.changedSteps()
	pl.Gone, pl.goneRemote = r.goneDirty()
	mask := masker(t, nil) // the secret vars: a dry run reads no secret
	pl.Notify, pl.SLA = notifyPlan(t.p.Notify, mask), slaText(t.p.SLA)
	pl.Steps = make([]PlanStep, 0, len(t.steps))
	now := e.opts.Clock.Now()
	notStarted := &eventlog.StepState{Status: eventlog.Pending} // read only
	var fc *planCache                                           // only for a pipeline with cached steps: a plan may have 100,000 steps
	if slices.ContainsFunc(t.p.Steps, func(s *pipeline.Step) bool { return s.Cache != nil }) {
		r.store = cache.New(t.dir.Root, e.opts.FS)
		fc = &planCache{r: r, mask: mask, results: map[string]*planResult{}}
	}
	for _, i := range t.p.TopoOrder() {
		rs := t.steps[i]
		st := state.Steps[rs.step.ID]
		if st == nil {
			st = notStarted
		}
		ps := decide(rs.step, st, sc, t.p.MaxDirtyRestarts, now)
		if pl.Complete {
			ps.Action, ps.Reason = ActionKeep, "task complete"
		}
		if fc != nil {
			fc.decide(rs, st, &ps)
		}
		describe(&ps, rs, mask)
		ps.Notify = notifyPlan(rs.step.Notify, mask)
		if rs.step.Container != nil && ps.Command != "" {
			ps.Container = r.containerPlan(rs) // container.go
		}
		if rs.step.Run != "" && rs.step.Foreach == nil && willRun(ps.Action) {
			log := t.childLog(pipeline.ChildTaskID(t.id, rs.step.ID), ps.NextRetry == 0 || endedOK(st), st.ChildLog, pl.Log, now)
			if ps.Child, err = e.childPlan(t, rs, ro, log, mask); err != nil {
				return nil, err
			}
		}
		pl.Steps = append(pl.Steps, ps)
	}
	return pl, nil
}

// planLog finds the log a run would continue (or says it would start a
// new one) and returns the task's state from it, without locking it.
func (e *Engine) planLog(t *task, ro RunOptions, pl *Plan) (*eventlog.State, error) {
	state := eventlog.NewState(t.id)
	logPath, err := t.dir.LatestLog(t.id)
	if err != nil {
		return nil, err
	}
	if ro.log != "" {
		// A sub-pipeline's task: the log its parent's attempt would name.
		if _, err := os.Stat(ro.log); err != nil {
			pl.NewLog, pl.Log = true, ro.log
			return state, nil
		}
		logPath = ro.log
	}
	child := ro.log != ""
	if logPath == "" && !ro.Fresh {
		arch, err := (&taskRun{e: e, t: t, ro: ro}).newestArchived()
		if err != nil {
			return nil, err
		}
		if arch != nil && arch.state.Complete() {
			own, err := claim(t, arch.state.Start, false, child, ro.AcceptChanges)
			if err != nil {
				return nil, err
			}
			if own.mine {
				logPath, state = arch.path, arch.state // complete: a run would do nothing
			}
		}
	}
	switch {
	case logPath != "" && ro.Fresh:
		// A run would refuse to give another pipeline's markers to its
		// new log; a damaged log is the run's to report.
		if st, _, err := statedir.Replay(logPath, t.id, nil); err == nil {
			if _, err := claim(t, st.Start, false, child, ro.AcceptChanges); err != nil {
				return nil, err
			}
		}
		fallthrough
	case logPath == "" || ro.Fresh:
		pl.NewLog = true
		pl.Log = t.dir.Log(t.id, e.opts.Clock.Now().Unix())
	case statedir.IsArchive(logPath):
		pl.Log = logPath
	default:
		pl.Log = logPath
		tail, err := eventlog.Read(logPath, eventlog.ReadOptions{TaskID: t.id}, func(r *eventlog.Record) error {
			if err := eventlog.CheckFormat(logPath, r); err != nil {
				return err // run would refuse the log
			}
			state.Apply(r)
			return nil
		})
		if err != nil {
			return nil, err
		}
		pl.TornBytes = tail.Torn
		if _, err := claim(t, state.Start, true, child, ro.AcceptChanges); err != nil {
			return nil, err
		}
	}
	return state, nil
}

// fileResumeFrom is the step a run would resume from: --resume-from, else
// the file's resume_from unless the log has applied it already.
func fileResumeFrom(p *pipeline.Pipeline, ro RunOptions, state *eventlog.State) string {
	if ro.ResumeFrom != "" || p.ResumeFrom == "" {
		return ro.ResumeFrom
	}
	if slices.Contains(state.ResumedFrom, p.ResumeFrom) {
		return ""
	}
	return p.ResumeFrom
}

// describe fills in what a plan shows of a step's body, condition,
// resources and cleanup hook, with secret values masked.
func describe(ps *PlanStep, rs *renderedStep, mask *textfmt.Masker) {
	s := rs.step
	ps.Command = rs.command
	if s.Command == "" {
		ps.Body = rs.body()
	}
	if s.Foreach != nil {
		ps.Command, ps.Body = "", "foreach: one instance per item of the output of "+s.Foreach.Output+", once it ends"
	}
	ps.When, ps.Resources = s.When, s.Resources
	switch {
	case s.CleanupCommand != "":
		ps.Cleanup = rs.cleanupCommand
	case s.CleanupLua != "":
		ps.Cleanup = "lua"
	case s.CleanupScript != "":
		ps.Cleanup = "script:" + s.CleanupScript
	}
	if s.Shell != nil {
		ps.Shell = pipeline.ShellText(s.Shell)
	}
	if mask != nil {
		ps.Command, ps.Body, ps.Cleanup = mask.String(ps.Command), mask.String(ps.Body), mask.String(ps.Cleanup)
	}
}

// willRun reports whether a plan's action runs the step.
func willRun(action string) bool {
	return action == ActionRun || action == ActionRerun || action == ActionCleanRerun
}

// childPlan is the plan of the sub-pipeline that the run: step rs would
// run in the child log at log (childLog). mask is the task's.
func (e *Engine) childPlan(t *task, rs *renderedStep, ro RunOptions, log string, mask *textfmt.Masker) (*Plan, error) {
	cr := childRunOf(t, rs, ro, log, mask)
	pl, err := e.Plan(cr.path, cr.ro)
	if err != nil {
		return nil, fmt.Errorf("step %q: plan of sub-pipeline %s: %w", rs.step.ID, cr.path, err)
	}
	return pl, nil
}

func (e *Engine) dryRun(t *task, ro RunOptions) error {
	pl, err := e.plan(t, ro)
	if err != nil {
		return err
	}
	if ro.JSON {
		enc := json.NewEncoder(e.opts.Stdout)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(pl)
	}
	w := bufio.NewWriterSize(e.opts.Stdout, 64<<10)
	writePlan(w, pl)
	if pl.Complete {
		// As apollo run says it: a complete task does nothing, changed or not.
		for _, l := range completeChanges(t.p, pl.Changed) {
			fmt.Fprintln(w, l)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write the plan: %w", err)
	}
	switch {
	case pl.Complete:
	case (len(pl.Changed) > 0 || len(pl.Gone) > 0) && !ro.AcceptChanges:
		return &ChangedError{TaskID: pl.TaskID, Steps: pl.Changed, Gone: pl.Gone}
	case len(pl.goneRemote) > 0:
		return &ChangedError{TaskID: pl.TaskID, Gone: pl.goneRemote, Remote: true}
	}
	return nil
}

func writePlan(w io.Writer, pl *Plan) {
	fmt.Fprintf(w, "dry run of task %s (%s): nothing is run or written\n", pl.TaskID, pl.Pipeline)
	if pl.NewLog {
		fmt.Fprintf(w, "log: %s (new)\n", pl.Log)
	} else {
		fmt.Fprintf(w, "log: %s\n", pl.Log)
	}
	if pl.TornBytes > 0 {
		fmt.Fprintf(w, "note: the log ends in a %d-byte torn tail (a write cut off by a crash); the run will cut it and keep the bytes aside\n", pl.TornBytes)
	}
	if pl.Complete {
		fmt.Fprintf(w, "the task is complete: apollo run would do nothing (use --resume-from or --fresh)\n")
	}
	if pl.SLA != "" {
		fmt.Fprintf(w, "sla: %s after the task's first start (sla_missed if it is not complete by then)\n", pl.SLA)
	}
	for _, n := range pl.Notify {
		fmt.Fprintf(w, "notify %s\n", n)
	}
	for _, tr := range pl.Triggers {
		fmt.Fprintf(w, "trigger: %s\n", tr)
	}
	if pl.ResumeFrom != "" {
		fmt.Fprintf(w, "resume from %s: it and its descendants run again; other unfinished steps are skipped\n", pl.ResumeFrom)
	}
	if len(pl.Changed) > 0 && !pl.Complete {
		fmt.Fprintf(w, "changed since they succeeded: %s (apollo run refuses without --accept-changes)\n", strings.Join(pl.Changed, ", "))
	}
	if len(pl.Gone) > 0 && !pl.Complete {
		fmt.Fprintf(w, "cut off by a crash and no longer in the pipeline: %s (apollo run refuses without --accept-changes, "+
			"which ends what they left running and runs no cleanup)\n", strings.Join(pl.Gone, ", "))
	}
	// A plan can have 100,000 lines: each is put together by hand, as
	// fmt.Fprintf("%3d. %-12s %-20s %s") would write it.
	var line []byte
	for i, ps := range pl.Steps {
		num := strconv.Itoa(i + 1)
		line = append(append(line[:0], "   "[min(len(num), 3):]...), num...)
		line = padRight(append(line, ". "...), ps.Action, 12)
		line = padRight(append(line, ' '), ps.ID, 20)
		line = append(append(line, ' '), ps.Reason...)
		if ps.WaitMS > 0 {
			line = strconv.AppendInt(append(line, "; waits "...), ps.WaitMS, 10)
			line = append(line, "ms before its retry"...)
		}
		w.Write(append(line, '\n'))
		if len(ps.Restores) > 0 {
			fmt.Fprintf(w, "       restores %s\n", textfmt.OneLine(strings.Join(ps.Restores, ", "), 300))
		}
		if ps.Action == ActionKeep || ps.Action == ActionSkip || ps.Action == ActionLeave || ps.Action == ActionCached {
			continue
		}
		if ps.Cache != "" {
			fmt.Fprintf(w, "       not from the cache: %s\n", ps.Cache)
		}
		for _, name := range ps.Resources {
			fmt.Fprintf(w, "       holds %s (at most %d step(s) at once)\n", name, pl.Resources[name])
		}
		for _, n := range ps.Notify {
			fmt.Fprintf(w, "       notify %s\n", n)
		}
		if ps.When != "" {
			fmt.Fprintf(w, "       when: %s (decided when it is ready)\n", textfmt.OneLine(ps.When, 300))
		}
		cleanup := ps.Action == ActionCleanRerun && ps.Cleanup != ""
		if ps.Shell != "" && (ps.Command != "" || cleanup) {
			fmt.Fprintf(w, "       shell: %s\n", textfmt.OneLine(ps.Shell, 300))
		}
		if cleanup {
			fmt.Fprintf(w, "       cleanup: %s\n", textfmt.OneLine(ps.Cleanup, 300))
		}
		if ps.Container != "" {
			fmt.Fprintf(w, "       in: %s\n", textfmt.OneLine(ps.Container, 2000))
		}
		if ps.Command != "" {
			fmt.Fprintf(w, "       $ %s\n", textfmt.OneLine(ps.Command, 300))
		} else if ps.Body != "" {
			fmt.Fprintf(w, "       %s\n", textfmt.OneLine(ps.Body, 300))
		}
		if ps.Child != nil {
			var b strings.Builder
			writePlan(&b, ps.Child)
			for l := range strings.Lines(b.String()) {
				io.WriteString(w, "       | "+l)
			}
		}
	}
}

// padRight appends s and then spaces up to width runes, as fmt's %-Ns.
func padRight(b []byte, s string, width int) []byte {
	b = append(b, s...)
	for n := utf8.RuneCountInString(s); n < width; n++ {
		b = append(b, ' ')
	}
	return b
}
