package engine

import (
	"fmt"
	"strings"
	"time"

	"apollo/engine/pipeline"
	"apollo/engine/usage"
	"apollo/eventlog"
)

// Plan actions: what a run does with each step.
const (
	ActionRun        = "run"         // never started: run it
	ActionKeep       = "keep"        // succeeded or skipped: keep the result
	ActionRerun      = "rerun"       // failed before, no cleanup hook: run again
	ActionCleanRerun = "clean+rerun" // cut off or failed: clean up, then run again
	ActionSkip       = "skip"        // resume_from leaves it out
	ActionCrashLoop  = "fail"        // cut off too many times in a row
	ActionLeave      = "leave"       // outside --only or --until: left as it is
	ActionCached     = "cached"      // its result comes from the cache (dry run only)
)

// PlanStep is one step of a plan.
type PlanStep struct {
	ID         string   `json:"id"`
	Action     string   `json:"action"`
	Reason     string   `json:"reason"`
	Status     string   `json:"status"`
	NextRetry  int      `json:"next_retry_count"`
	DependsOn  []string `json:"depends_on"`
	Optional   bool     `json:"optional"`
	Command    string   `json:"command,omitempty"`
	Container  string   `json:"container,omitempty"` // the engine's command line that runs Command (image:)
	Body       string   `json:"body,omitempty"`
	Cleanup    string   `json:"cleanup,omitempty"`
	Shell      string   `json:"shell,omitempty"` // the interpreter of its shell bodies, when not the default sh
	When       string   `json:"when,omitempty"`
	Resources  []string `json:"resources,omitempty"`
	Notify     []string `json:"notify,omitempty"` // who its events would be sent to (notify:)
	WaitMS     int64    `json:"wait_ms,omitempty"`
	InputReady bool     `json:"-"`
	// Child is the plan of the sub-pipeline a run: step would run (or
	// resume) as its task, when the step would run.
	Child *Plan `json:"child,omitempty"`

	// CachedFrom names the task run whose result a cached step would take;
	// Cache says why a step with cache: would run instead; Restores are the
	// outputs: files a cached step would restore (those missing or changed).
	CachedFrom string   `json:"cached_from,omitempty"`
	Cache      string   `json:"cache,omitempty"`
	Restores   []string `json:"restores,omitempty"`
}

// Plan is what apollo run would do now: per step, in dependency order.
type Plan struct {
	TaskID     string   `json:"task_id"`
	Pipeline   string   `json:"pipeline"`
	Log        string   `json:"log"`
	NewLog     bool     `json:"new_log"`
	Complete   bool     `json:"complete"`
	ResumeFrom string   `json:"resume_from,omitempty"`
	Changed    []string `json:"changed,omitempty"`
	// Gone are the steps cut off by a crash that the pipeline no longer
	// has (renamed or removed since): apollo run refuses them without
	// --accept-changes.
	Gone       []string `json:"gone,omitempty"`
	goneRemote []string // those of Gone dispatched to a hub
	TornBytes  int64    `json:"torn_tail_bytes,omitempty"`
	// Resources are the pipeline's named resources and how many steps
	// may hold each at once.
	Resources map[string]int `json:"resources,omitempty"`
	// Notify says who the task's events would be sent to (notify:), SLA
	// the pipeline's sla:.
	Notify []string `json:"notify,omitempty"`
	SLA    string   `json:"sla,omitempty"`
	// Triggers say what, besides its schedule, makes apollo serve start
	// the pipeline (triggers:), one line each.
	Triggers []string   `json:"triggers,omitempty"`
	Steps    []PlanStep `json:"steps"`
}

// scope is what an invocation is asked to run beyond what its log leaves
// to do: resume_from X (X and its descendants again, other unfinished steps
// skipped), --only X (X again, alone) or --until X (X and the steps it
// depends on, as needed). The zero scope runs what the log leaves to do.
type scope struct {
	why        string          // "resume_from X", "--only X"...; "" for none
	rerun      map[string]bool // run again, whatever their state
	skipOthers bool            // resume_from: every other unfinished step is skipped
	within     map[string]bool // --only, --until: steps outside are left as they are
}

// scopeOf is the scope of a run's options, given the resume_from it applies
// ("" for none).
func scopeOf(p *pipeline.Pipeline, ro RunOptions, resumeFrom string) scope {
	switch {
	case resumeFrom != "":
		by := "resume_from " + resumeFrom
		if ro.ResumeFrom != "" {
			by = "--resume-from " + resumeFrom
		}
		return scope{why: by, rerun: p.Descendants(resumeFrom), skipOthers: true}
	case ro.Only != "":
		return scope{why: "--only " + ro.Only, rerun: map[string]bool{ro.Only: true}, within: map[string]bool{ro.Only: true}}
	case ro.Until != "":
		return scope{why: "--until " + ro.Until, within: p.Ancestors(ro.Until)}
	}
	return scope{}
}

// checkOnly refuses --only X when a step X depends on is not done: X alone
// cannot run; --until X would run those steps too.
func checkOnly(p *pipeline.Pipeline, ro RunOptions, state *eventlog.State) error {
	if ro.Only == "" {
		return nil
	}
	var notDone []string
	for _, d := range p.Step(ro.Only).DependsOn {
		st := state.Step(d)
		switch {
		case st.Status == eventlog.Success, st.Status == eventlog.Skipped:
		case st.Status == eventlog.Failed && p.Step(d).Optional:
		default:
			notDone = append(notDone, fmt.Sprintf("%s (%s)", d, st.Status))
		}
	}
	if len(notDone) == 0 {
		return nil
	}
	return usage.Errorf("--only %s: it depends on step(s) not done yet: %s; run them first, or use --until %s to run them too",
		ro.Only, strings.Join(notDone, ", "), ro.Only)
}

// inScope reports whether a scope's set of step ids holds s: by its own id,
// or, for a foreach instance, by its template's (expanded at run time, an
// instance is in no set the options made).
func inScope(set map[string]bool, s *pipeline.Step) bool {
	return set[s.ID] || (s.InstanceOf != "" && set[s.InstanceOf])
}

// decide says what a run does with one step, given its state in the log.
func decide(s *pipeline.Step, st *eventlog.StepState, sc scope, maxDirty int, now time.Time) PlanStep {
	ps := PlanStep{ID: s.ID, Status: st.Status, DependsOn: s.DependsOn, Optional: s.Optional}
	if ps.DependsOn == nil {
		ps.DependsOn = []string{}
	}
	ps.NextRetry = 0
	if st.Attempts > 0 {
		ps.NextRetry = st.RetryCount + 1
	}
	cleanThenRerun := func(rerun, why string) {
		if st.Dirty || (st.Unclean && s.HasCleanup()) {
			ps.Action, ps.Reason = ActionCleanRerun, why
			return
		}
		ps.Action, ps.Reason = rerun, why
	}
	switch {
	case inScope(sc.rerun, s):
		cleanThenRerun(ActionRerun, sc.why)
	case sc.skipOthers && st.Status != eventlog.Success:
		ps.Action, ps.Reason = ActionSkip, "not part of "+sc.why
	case st.Status == eventlog.Success || st.Status == eventlog.Skipped:
		ps.Action, ps.Reason = ActionKeep, "already "+st.Status
	case sc.within != nil && !inScope(sc.within, s):
		ps.Action, ps.Reason = ActionLeave, "not selected by "+sc.why
	case st.Dirty && st.DirtyRecoveries >= maxDirty:
		ps.Action, ps.Reason = ActionCrashLoop, "crash loop: cut off in each of the last runs"
	case st.Dirty:
		ps.Action, ps.Reason = ActionCleanRerun, "attempt cut off by a crash"
	case st.Unclean:
		why := "last attempt failed"
		switch {
		case st.TimedOut:
			why = "last attempt timed out"
		case st.Interrupted:
			why = "last attempt was interrupted"
		}
		cleanThenRerun(ActionRerun, why)
		ps.WaitMS = st.RemainingDelay(now).Milliseconds()
	case st.Attempts > 0 || st.Status != eventlog.Pending:
		ps.Action, ps.Reason = ActionRerun, "reset or cleaned up: run again"
	default:
		ps.Action, ps.Reason = ActionRun, "not started"
	}
	return ps
}

// resumeNews is the line a resume opens with: what the log left, by what
// this invocation does with it ("5 done, 3 cut off by a crash, 2 to run");
// "" when no step had started (a first run).
func resumeNews(nodes []*node) string {
	var done, cut, failed, toRun, again, skipped, left, loop int
	started := false
	for _, n := range nodes {
		started = started || (n.plan.Status != "" && n.plan.Status != eventlog.Pending) || n.plan.NextRetry > 0
		switch a := n.plan.Action; {
		case a == ActionKeep:
			done++
		case a == ActionCrashLoop:
			loop++
		case a == ActionSkip:
			skipped++
		case a == ActionLeave:
			left++
		case n.dirty:
			cut++
		case n.unclean:
			failed++
		case a == ActionRun:
			toRun++
		default:
			again++
		}
	}
	if !started {
		return ""
	}
	var parts []string
	for _, c := range []struct {
		n    int
		what string
	}{
		{done, "done"}, {cut, "cut off by a crash"}, {loop, "in a crash loop"}, {failed, "failed before"},
		{again, "to run again"}, {toRun, "to run"}, {skipped, "skipped"}, {left, "left as they are"},
	} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	return strings.Join(parts, ", ")
}

// PlanJSONDoc documents run --dry-run --json's output (Plan), shown by
// --help and checked against it by TestJSONDocs. Fields marked ? are left
// out when empty.
const PlanJSONDoc = `JSON (--dry-run --json), one object:
  {"task_id", "pipeline", "log", "new_log": bool, "complete": bool, "resume_from"?,
   "changed"?: [step ids whose definition changed],
   "gone"?: [steps cut off by a crash that the pipeline no longer has], "torn_tail_bytes"?,
   "resources"?: {name: how many steps may hold it at once},
   "notify"?: [who the task's events go to], "sla"? (the pipeline's sla),
   "triggers"?: [what besides its schedule starts it in apollo serve, one line each],
   "steps": [{"id", "action": "run"|"keep"|"rerun"|"clean+rerun"|"skip"|"fail"|"leave"|"cached", "reason",
              "status", "next_retry_count", "depends_on": [ids], "optional": bool,
              "command"? (rendered shell), "body"? (Lua), "cleanup"?, "when"? (its condition),
              "shell"? (its shell: when not sh), "container"? (the engine command line of an image: step),
              "resources"? [names it holds], "notify"? [who its events go to], "wait_ms"?,
              "cached_from"? (the task run a cached step's result comes from),
              "restores"? [the outputs files it would restore: missing or changed],
              "cache"? (why a step with cache: runs instead),
              "child"? (a run step's sub-pipeline: its plan, this object)}]}
  steps are in dependency order.
`
