package engine

import (
	"time"

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
	Body       string   `json:"body,omitempty"`
	Cleanup    string   `json:"cleanup,omitempty"`
	WaitMS     int64    `json:"wait_ms,omitempty"`
	InputReady bool     `json:"-"`
}

// Plan is what apollo run would do now: per step, in dependency order.
type Plan struct {
	TaskID     string     `json:"task_id"`
	Pipeline   string     `json:"pipeline"`
	Log        string     `json:"log"`
	NewLog     bool       `json:"new_log"`
	Complete   bool       `json:"complete"`
	ResumeFrom string     `json:"resume_from,omitempty"`
	Changed    []string   `json:"changed,omitempty"`
	TornBytes  int64      `json:"torn_tail_bytes,omitempty"`
	Steps      []PlanStep `json:"steps"`
}

// topoOrder returns step indexes in dependency order, ties broken by the
// order of the file. A file whose steps only depend on earlier ones (the
// usual way to write one) is already in that order.
func topoOrder(p *Pipeline) []int {
	deps := p.depIndexes()
	order := make([]int, len(p.Steps))
	sorted := true
	for i, ds := range deps {
		order[i] = i
		for _, j := range ds {
			sorted = sorted && int(j) < i
		}
	}
	if sorted {
		return order
	}
	order = order[:0]
	waiting := make([]int, len(p.Steps))
	children := make([][]int, len(p.Steps))
	for i, ds := range deps {
		for _, j := range ds {
			children[j] = append(children[j], i)
			waiting[i]++
		}
	}
	h := &intHeap{}
	for i := range p.Steps {
		if waiting[i] == 0 {
			h.push(i)
		}
	}
	for len(*h) > 0 {
		i := h.pop()
		order = append(order, i)
		for _, c := range children[i] {
			if waiting[c]--; waiting[c] == 0 {
				h.push(c)
			}
		}
	}
	return order
}

// depIndexes returns, per step, the indexes in p.Steps of its
// dependencies: as Load found them, or looked up for a Pipeline built by
// hand.
func (p *Pipeline) depIndexes() [][]int32 {
	deps := make([][]int32, len(p.Steps))
	for i, s := range p.Steps {
		if len(s.depIdx) != len(s.DependsOn) {
			return p.lookUpDeps()
		}
		deps[i] = s.depIdx
	}
	return deps
}

func (p *Pipeline) lookUpDeps() [][]int32 {
	index := make(map[string]int32, len(p.Steps))
	for i, s := range p.Steps {
		index[s.ID] = int32(i)
	}
	deps := make([][]int32, len(p.Steps))
	for i, s := range p.Steps {
		for _, d := range s.DependsOn {
			if j, ok := index[d]; ok {
				deps[i] = append(deps[i], j)
			}
		}
	}
	return deps
}

// descendants returns id and every step that depends on it, transitively.
func descendants(p *Pipeline, id string) map[string]bool {
	children := map[string][]string{}
	for _, s := range p.Steps {
		for _, d := range s.DependsOn {
			children[d] = append(children[d], s.ID)
		}
	}
	out := map[string]bool{id: true}
	queue := []string{id}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range children[cur] {
			if !out[c] {
				out[c] = true
				queue = append(queue, c)
			}
		}
	}
	return out
}

// decide says what a run does with one step, given its state in the log.
func decide(s *Step, st *eventlog.StepState, resumeFrom string, rerunSet map[string]bool, maxDirty int, now time.Time) PlanStep {
	ps := PlanStep{ID: s.ID, Status: st.Status, DependsOn: s.DependsOn, Optional: s.Optional}
	if ps.DependsOn == nil {
		ps.DependsOn = []string{}
	}
	ps.NextRetry = 0
	if st.Attempts > 0 {
		ps.NextRetry = st.RetryCount + 1
	}
	cleanThenRerun := func(rerun, why string) {
		if st.Dirty || (st.Unclean && s.hasCleanup()) {
			ps.Action, ps.Reason = ActionCleanRerun, why
			return
		}
		ps.Action, ps.Reason = rerun, why
	}
	switch {
	case rerunSet[s.ID]:
		cleanThenRerun(ActionRerun, "resume_from "+resumeFrom)
	case resumeFrom != "" && st.Status != eventlog.Success:
		ps.Action, ps.Reason = ActionSkip, "not part of resume_from "+resumeFrom
	case st.Status == eventlog.Success || st.Status == eventlog.Skipped:
		ps.Action, ps.Reason = ActionKeep, "already "+st.Status
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

// intHeap is a min-heap of step indexes.
type intHeap []int

func (h *intHeap) push(x int) {
	*h = append(*h, x)
	a := *h
	for i := len(a) - 1; i > 0; {
		parent := (i - 1) / 2
		if a[parent] <= a[i] {
			break
		}
		a[parent], a[i] = a[i], a[parent]
		i = parent
	}
}

func (h *intHeap) pop() int {
	a := *h
	top := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	for i := 0; ; {
		small, l, r := i, 2*i+1, 2*i+2
		if l < len(a) && a[l] < a[small] {
			small = l
		}
		if r < len(a) && a[r] < a[small] {
			small = r
		}
		if small == i {
			break
		}
		a[i], a[small] = a[small], a[i]
		i = small
	}
	*h = a
	return top
}
