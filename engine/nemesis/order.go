package nemesis

import (
	"fmt"
	"slices"
	"strings"

	"apollo/eventlog"
)

// depState is a step's state as the records so far replay it, for
// StartOrder: its status and the record that set it.
type depState struct {
	status string
	event  string // the record's event type
	retry  int
	why    string // the record, in words
}

// StartOrder checks, over a task's records in seq order, that no step
// starts before its dependencies are satisfied (docs/spec.md §2.5): at a
// step's start — a STEP_START or DISPATCH of any attempt, or a STEP_END
// SUCCESS taken from the cache (cached_from, no STEP_START) — each of its
// dependencies must be, as the records before replay it, SUCCESS or
// SKIPPED, or FAILED and optional.
//
// A step's dependencies are the depends_on of the TASK_START in effect
// (the latest before the start), plus refs[id]: the ancestors whose
// outputs it names (pipeline.Step.OutputRefs), which the log does not
// record; nil is none. An instance ID[item] of a foreach: {output: ...}
// template ID, which TASK_START does not list, has the template's
// dependencies and the template itself; a step that depends on such a
// template also waits for each instance its latest expansion made, so an
// instance starting after it is a breach too.
//
// What satisfies a dependency is its latest state, never an older one: a
// STEP_START, DISPATCH, a STEP_END that asks for a retry, a CLEANUP before
// a rerun, a LOST of its current attempt, or a resume_from or reset
// intervention that names it (which makes it PENDING, docs/spec.md §5.8)
// undoes an earlier SUCCESS; a skip intervention makes it SKIPPED. A
// satisfaction in an earlier invocation of the log counts, as long as
// nothing undid it since.
func StartOrder(recs []*eventlog.Record, refs map[string][]string) []Violation {
	var vs []Violation
	add := func(format string, args ...any) {
		vs = append(vs, Violation{Kind: KindEarlyStart, Detail: fmt.Sprintf(format, args...)})
	}
	graph := map[string]eventlog.StepInfo{}
	state := map[string]*depState{}
	// instances are, by template, the instances of its latest expansion
	// seen so far; waiting, the steps that depend on the template and
	// started since that expansion, with the seq of their start.
	instances := map[string][]string{}
	waiting := map[string]map[string]int64{}

	// template is the foreach template whose instance id is, if id is
	// no step of the graph itself.
	template := func(id string) string {
		if _, ok := graph[id]; ok {
			return ""
		}
		i := strings.IndexByte(id, '[')
		if i <= 0 {
			return ""
		}
		if _, ok := graph[id[:i]]; !ok {
			return ""
		}
		return id[:i]
	}
	depsOf := func(id string) []string {
		if si, ok := graph[id]; ok {
			return append(slices.Clip(si.DependsOn), refs[id]...)
		}
		if t := template(id); t != "" {
			return append(append(slices.Clip(graph[t].DependsOn), refs[t]...), t)
		}
		return nil
	}
	optional := func(id string) bool {
		if t := template(id); t != "" {
			return graph[t].Optional
		}
		return graph[id].Optional
	}
	// unmet says why dep does not satisfy a dependent now, "" when it does.
	unmet := func(dep string) string {
		st := state[dep]
		if st == nil {
			return "it has no record yet"
		}
		switch {
		case st.status == eventlog.Success, st.status == eventlog.Skipped:
			return ""
		case st.status == eventlog.Failed && optional(dep):
			return ""
		case st.status == eventlog.Failed:
			return fmt.Sprintf("it is FAILED and not optional (%s)", st.why)
		}
		return fmt.Sprintf("it is %s (%s)", st.status, st.why)
	}
	set := func(id, status string, r *eventlog.Record, why string) {
		state[id] = &depState{status: status, event: r.EventType, retry: r.RetryCount, why: why}
	}

	for _, r := range recs {
		if r.EventType == eventlog.TaskStart && r.Start != nil {
			graph = make(map[string]eventlog.StepInfo, len(r.Start.Steps))
			for _, si := range r.Start.Steps {
				graph[si.ID] = si
			}
			continue
		}
		if r.EventType == eventlog.Warning && r.Intervention != nil {
			iv := r.Intervention
			for _, id := range iv.Steps {
				switch iv.Action {
				case eventlog.ActionResumeFrom, eventlog.ActionReset:
					set(id, eventlog.Pending, r, fmt.Sprintf("reopened by the %s WARNING at seq %d", iv.Action, r.Seq))
					for _, ws := range waiting {
						delete(ws, id)
					}
				case eventlog.ActionSkip:
					set(id, eventlog.Skipped, r, fmt.Sprintf("skipped by the WARNING at seq %d", r.Seq))
				}
			}
			continue
		}
		id := r.StepID
		if id == "" {
			continue
		}
		cached := r.EventType == eventlog.StepEnd && r.Status == eventlog.Success && r.CachedFrom != ""
		start := r.EventType == eventlog.StepStart || r.EventType == eventlog.Dispatch || cached
		// A remote attempt starts at its DISPATCH: its STEP_START, later,
		// is the same start.
		if st := state[id]; r.EventType == eventlog.StepStart && st != nil &&
			st.event == eventlog.Dispatch && st.retry == r.RetryCount {
			start = false
		}
		if start {
			what := fmt.Sprintf("%s of attempt %d", r.EventType, r.RetryCount)
			if cached {
				what = "cached STEP_END SUCCESS"
			}
			for _, dep := range depsOf(id) {
				if why := unmet(dep); why != "" {
					add("step %s started (%s, seq %d) before its dependency %s was satisfied: %s", id, what, r.Seq, dep, why)
				}
				if dep == template(id) {
					continue // an instance waits for its template's expansion, not its siblings
				}
				for _, inst := range instances[dep] {
					if why := unmet(inst); why != "" {
						add("step %s started (%s, seq %d) before %s, an instance of its dependency %s, was satisfied: %s",
							id, what, r.Seq, inst, dep, why)
					}
				}
				if waiting[dep] == nil {
					waiting[dep] = map[string]int64{}
				}
				waiting[dep][id] = r.Seq
			}
		}
		// An instance first seen after a dependent of its template started:
		// that dependent did not wait for it.
		if t := template(id); t != "" && !slices.Contains(instances[t], id) {
			instances[t] = append(instances[t], id)
			ws := make([]string, 0, len(waiting[t]))
			for w := range waiting[t] {
				ws = append(ws, w)
			}
			slices.Sort(ws)
			for _, w := range ws {
				add("step %s started (seq %d) before %s, an instance of its dependency %s (first recorded at seq %d: %s %s)",
					w, waiting[t][w], id, t, r.Seq, r.EventType, r.Status)
			}
		}
		switch r.EventType {
		case eventlog.StepStart, eventlog.Dispatch:
			set(id, eventlog.Running, r, fmt.Sprintf("%s of attempt %d at seq %d", r.EventType, r.RetryCount, r.Seq))
			instances[id], waiting[id] = nil, nil // a template: a new expansion to come
		case eventlog.StepEnd:
			set(id, r.Status, r, fmt.Sprintf("STEP_END %s of attempt %d at seq %d", r.Status, r.RetryCount, r.Seq))
			if r.Status == eventlog.Success {
				instances[id], waiting[id] = nil, nil // the expansion's record
			}
		case eventlog.Cleanup:
			set(id, r.Status, r, fmt.Sprintf("CLEANUP %s of attempt %d at seq %d", r.Status, r.RetryCount, r.Seq))
		case eventlog.Lost:
			if st := state[id]; st != nil && st.retry == r.RetryCount {
				set(id, eventlog.Running, r, fmt.Sprintf("LOST of attempt %d at seq %d", r.RetryCount, r.Seq))
			}
		}
	}
	return vs
}
