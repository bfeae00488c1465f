package cron

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"

	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// A trigger (a pipeline's triggers:, docs/spec.md §9.6) decides to start a
// run by appending a queued entry with its Key to the schedule log; the
// queue then starts it as it starts any queued run. The Key says what was
// decided — after:<seq of the upstream's started entry>,
// file:<path>:<size>:<mtime>, webhook:<name>:<delivery id> — so that a
// restart of serve neither decides it twice (the key is in the log) nor
// loses it (a queued entry without its started entry is started; a started
// one is taken up as any run is).

// triggered reports whether trigger names a kind of triggers:.
func triggered(trigger string) bool {
	return trigger == TriggerAfter || trigger == TriggerFile || trigger == TriggerWebhook
}

// firedKey is the key of the fired set: a decision is per pipeline.
func firedKey(rel, key string) string { return rel + "\x00" + key }

// noteFired remembers the decision an entry records.
func (s *Scheduler) noteFired(e *Entry) {
	if e.Key != "" && e.Event == EventQueued {
		s.fired[firedKey(e.Pipeline, e.Key)] = true
	}
	if id, ok := apiKeyID(e.Key); ok && e.Event == EventStarted {
		s.keyed[id] = e
	}
}

// Fired reports whether the trigger decision key was taken for pipeline rel.
func (s *Scheduler) Fired(rel, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fired[firedKey(rel, key)]
}

// maxTriggerVar and maxTriggerVars bound what a trigger passes as --var
// values: one value (an argument of the child's command line), and all.
const (
	maxTriggerVar  = 64 << 10
	maxTriggerVars = 256 << 10
)

// fireTrigger queues a run of p that the trigger decision key started,
// with vars; s.mu is held. It returns the queued entry, or nil when the
// decision was taken before (a replay) or the log could not be written.
func (s *Scheduler) fireTrigger(p Pipe, kind, key, by string, vars map[string]string) (*Entry, bool) {
	if s.fired[firedKey(p.Rel, key)] {
		return nil, false
	}
	now := s.opts.Clock.Now().UTC()
	date := now.Format("2006-01-02")
	id := fmt.Sprintf("%s-%s-%s%d", p.TaskName, date, kind, s.log.Seq()+1)
	e := &Entry{Event: EventQueued, Pipeline: p.Rel, TaskID: id, TaskDate: date, Trigger: kind, By: by, Key: key, Vars: vars}
	if err := s.append(e); err != nil {
		s.opts.Logf("apollo serve: %v", err)
		return nil, false
	}
	s.queues[p.Rel] = append(s.queues[p.Rel], e)
	s.opts.Logf("apollo serve: %s trigger of %s queued task %s (%s)", kind, p.Rel, id, key)
	s.poke()
	return e, true
}

// afterEnded decides the after: triggers of the run started by entry seq,
// which ended with code (nil: it ended while serve was down, or its runner
// was not serve's child); s.mu is held. It runs before the run's exited
// entry is written, so that a crash between them decides again at the next
// exit, and the keys keep it to once.
func (s *Scheduler) afterEnded(seq int64, a *active, code *int) {
	up := s.startedEntry(seq, a)
	if up == nil {
		return
	}
	upstream, ok := s.pipes[up.Pipeline]
	if !ok {
		return
	}
	var downs []Pipe
	for _, rel := range slices.Sorted(maps.Keys(s.pipes)) {
		p := s.pipes[rel].pipe
		for _, t := range p.Triggers {
			if t.Kind == pipeline.TriggerAfter && filepath.Clean(t.AfterPath) == filepath.Clean(upstream.pipe.Path) {
				downs = append(downs, p)
				break
			}
		}
	}
	if len(downs) == 0 {
		return
	}
	dir := s.stateDir(up)
	status := pipeline.AfterFailure
	if (code != nil && *code == 0) || (code == nil && s.opts.Complete(dir, up.TaskID)) {
		status = pipeline.AfterSuccess
	}
	var vars map[string]string
	for _, p := range downs {
		for _, t := range p.Triggers {
			if t.Kind != pipeline.TriggerAfter || filepath.Clean(t.AfterPath) != filepath.Clean(upstream.pipe.Path) ||
				(t.Status != pipeline.AfterAny && t.Status != status) {
				continue
			}
			if vars == nil {
				vars = upstreamVars(dir, up, status, s.opts.Logf)
			}
			s.fireTrigger(p, TriggerAfter, "after:"+strconv.FormatInt(up.Seq, 10), "after "+up.Pipeline, maps.Clone(vars))
		}
	}
}

// startedEntry finds the started entry seq: the active run's, or a recent
// one's.
func (s *Scheduler) startedEntry(seq int64, a *active) *Entry {
	if a != nil {
		return a.entry
	}
	for i := len(s.recent) - 1; i >= 0; i-- {
		if r := s.recent[i]; r.Seq == seq && r.Event == EventStarted {
			return r
		}
	}
	return nil
}

// upstreamVars are the trigger.* vars an after: trigger gives: the
// upstream run's pipeline, task id, status and its steps' outputs
// (trigger.outputs.STEP, and trigger.outputs.STEP.KEY for each key of an
// object), as {{outputs.…}} would render them, within the bounds.
func upstreamVars(stateDir string, up *Entry, status string, logf func(string, ...any)) map[string]string {
	vars := map[string]string{"trigger.kind": TriggerAfter, "trigger.pipeline": up.Pipeline,
		"trigger.task_id": up.TaskID, "trigger.status": status}
	path, _, err := statedir.Dir{Root: stateDir}.FindLog(up.TaskID)
	if err != nil || path == "" {
		return vars
	}
	st, _, err := statedir.Replay(path, up.TaskID, nil)
	if err != nil {
		return vars
	}
	total := 0
	add := func(name string, raw json.RawMessage) {
		var text string
		if json.Unmarshal(raw, &text) != nil {
			text = string(raw)
		}
		if len(text) > maxTriggerVar || total+len(text) > maxTriggerVars || !noNUL(text) {
			logf("apollo serve: after: trigger: {{%s}} of task %s is left out: too large for a --var", name, up.TaskID)
			return
		}
		total += len(text)
		vars[name] = text
	}
	for _, id := range slices.Sorted(maps.Keys(st.Steps)) {
		out := st.Steps[id].Output
		if len(out) == 0 || st.Steps[id].Status != eventlog.Success {
			continue
		}
		add("trigger.outputs."+id, out)
		var m map[string]json.RawMessage
		if json.Unmarshal(out, &m) == nil {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				add("trigger.outputs."+id+"."+k, m[k])
			}
		}
	}
	return vars
}

func noNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return false
		}
	}
	return true
}
