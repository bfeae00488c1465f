package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"apollo/engine/cache"
	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/engine/template"
	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// A step with cache: (docs/spec.md §5.15) is looked up in the store before
// its first attempt of an invocation, once its condition holds and its
// cleanup has run. Its key covers its input digest (rendered body, env,
// with, upstream output digests, secrets, Lua files), its cache.key, its
// folder, the content of its inputs: files and folders (an input that
// cannot be read keeps the step out of the cache) and the names of its
// outputs:.
// A hit restores the outputs (each atomically, checked against its digest;
// only those the step declares, never through a symbolic link) and only
// then appends a STEP_END SUCCESS with cached_from, so a resume
// keeps it like any success; a crash before that leaves the step to decide
// again, its restored files being what the result says anyway. A miss runs
// the step, and a success is saved once its STEP_END is durable: the
// blobs, then the entry, which names secrets as the log does ("***" in
// paths, a hash of cache.key).

// cacheProbe is what a cached step's key is made of, read just before the
// step would run.
type cacheProbe struct {
	prepared                   // the step, rendered, and its input digest
	key      string            // sha256:<hex>
	upstream map[string]string // output digests of the steps upstream
	inputs   []cache.File      // its inputs: files and folders; Digest "" for a missing one
	// unreadable says which input exists but could not be hashed (a
	// permission, a named pipe): the key cannot tell its content, so the
	// step is neither looked up nor saved. "" when every input was read.
	unreadable string
}

// probeCache reads what rs's key is made of: the inputs files in dir, the
// step's input digest given upstream and the secrets' digest.
func probeCache(rs *renderedStep, upstream map[string]string, secrets, dir string) *cacheProbe {
	rc := rs.cache
	pr := &cacheProbe{prepared: prepared{rs: rs, input: inputDigest(rs, upstream, secrets)}, upstream: upstream,
		inputs: make([]cache.File, len(rc.inputs))}
	for i, p := range rc.inputs {
		d, size, err := cache.HashInput(filepath.Join(dir, p))
		switch {
		case errors.Is(err, cache.ErrInputMissing):
			d, size = "", 0 // missing: a key of its own, and a reason
		case err != nil && pr.unreadable == "":
			pr.unreadable = fmt.Sprintf("input %s cannot be read (%v)", p, err)
		}
		pr.inputs[i] = cache.File{Path: p, Digest: d, Size: size}
	}
	files := make([][2]string, len(pr.inputs))
	for i, f := range pr.inputs {
		files[i] = [2]string{f.Path, f.Digest}
	}
	pr.key = digestOf(struct {
		V       int         `json:"v"`
		Input   string      `json:"input"`
		Key     string      `json:"key"`
		Dir     string      `json:"dir"`
		Inputs  [][2]string `json:"inputs"`
		Outputs []string    `json:"outputs"`
	}{1, pr.input, rc.key, rs.step.WorkingDir, files, rc.outputs})
	return pr
}

// lookupCache returns the entry a cached step can take its result from,
// or why there is none. mask masks the secrets in paths as the entry holds
// them (nil: none). The entry's outputs are the step's own outputs:, in
// order and by name: the key holds them, so an entry that names another
// file (an edited entry: ../outside/x, /etc/x) is not used. The returned
// entry's outputs carry the paths the step declares, in clear.
func lookupCache(store *cache.Store, taskName string, rs *renderedStep, pr *cacheProbe, mask *textfmt.Masker) (*cache.Entry, string) {
	id := rs.step.ID
	e, err := store.Get(taskName, id, pr.key)
	if err != nil {
		return nil, "its cache entry cannot be read: " + err.Error()
	}
	if e == nil {
		prev, _ := store.Latest(taskName, id)
		return nil, missReason(prev, pr, rs, mask)
	}
	declared := rs.cache.outputs
	for i, f := range e.Outputs {
		if i >= len(declared) || f.Path != mask.String(declared[i]) {
			return nil, fmt.Sprintf("its cache entry names output %q, which the step does not declare", f.Path)
		}
	}
	if len(e.Outputs) < len(declared) {
		return nil, fmt.Sprintf("its cache entry does not name output %s", mask.String(declared[len(e.Outputs)]))
	}
	for i, f := range e.Outputs {
		if !store.Has(f.Digest) {
			return nil, fmt.Sprintf("the saved copy of %s is gone from the cache", f.Path)
		}
		e.Outputs[i].Path = declared[i]
	}
	return e, ""
}

// missReason says what differs between the newest earlier result of a
// step, prev, and the step now.
// Paths are compared as the entry holds them, masked by mask.
func missReason(prev *cache.Entry, pr *cacheProbe, rs *renderedStep, mask *textfmt.Masker) string {
	if prev == nil {
		return "no earlier result in the cache"
	}
	was := make(map[string]string, len(prev.Inputs))
	for _, f := range prev.Inputs {
		was[f.Path] = f.Digest
	}
	var why []string
	for _, f := range pr.inputs {
		p := mask.String(f.Path)
		d, ok := was[p]
		switch {
		case f.Digest == "" && (!ok || d != ""):
			why = append(why, "input "+p+" is missing")
		case !ok:
			why = append(why, "input "+p+" is new")
		case d != f.Digest:
			why = append(why, "input "+p+" changed")
		}
	}
	for _, id := range slices.Sorted(maps.Keys(pr.upstream)) {
		if prev.Upstream[id] != pr.upstream[id] {
			why = append(why, "the output of step "+id+" changed")
		}
	}
	if prev.DefinitionDigest != rs.defDigest {
		reason := "the step's definition changed"
		switch names := perTaskBuiltins(rs.step); {
		case len(names) > 0 && names[0] != "{{task_date}}":
			reason += " (it uses " + strings.Join(names, " and ") + ", another in every task: " +
				"such a step is never taken from the cache)"
		case len(names) > 0:
			reason += " (it uses {{task_date}}, another every day)"
		}
		why = append(why, reason)
	}
	if prev.UserKeyDigest != userKeyDigest(rs.cache.key) {
		why = append(why, "cache.key changed")
	}
	if len(why) == 0 {
		if prev.InputDigest != pr.input {
			return "its inputs changed (vars, secrets or Lua files)"
		}
		return "its inputs or outputs changed"
	}
	if len(why) > 3 {
		why = append(why[:3], "more")
	}
	return strings.Join(why, ", ")
}

// perTaskBuiltins names the built-in variables s's body, env or with
// use whose value is another in every task ({{task_id}}, {{artifacts_dir}}),
// then {{task_date}}, another every day: they make its definition, and so
// its cache key, differ each time.
func perTaskBuiltins(s *pipeline.Step) []string {
	texts := []string{s.Command}
	for _, v := range s.Env {
		texts = append(texts, v)
	}
	for _, v := range s.With {
		if t, ok := v.(string); ok {
			texts = append(texts, t)
		}
	}
	var names []string
	for _, name := range []string{"task_id", "artifacts_dir", "task_date"} {
		for _, t := range texts {
			if usesVar(t, name) {
				names = append(names, "{{"+name+"}}")
				break
			}
		}
	}
	return names
}

// usesVar reports whether template text has a {{name}} placeholder.
func usesVar(text, name string) bool {
	segs, err := template.Parse(text)
	if err != nil {
		return false
	}
	return slices.ContainsFunc(segs, func(seg template.Segment) bool { return seg.Name == name })
}

// cacheable reports whether this invocation looks n up in the cache and
// saves its result.
func (r *taskRun) cacheable(n *node) bool {
	s := n.rs.step
	return s.Cache != nil && s.Foreach == nil && r.hub == nil
}

// probe reads n's cache key, just before it would run.
func (r *taskRun) probe(n *node) (*cacheProbe, error) {
	rs, err := r.late(n)
	if err != nil {
		return nil, err
	}
	return probeCache(rs, r.upstreamDigests(n), secretsDigest(r.secrets), r.stepDir(n.rs.step)), nil
}

// cached carries the attempts of a step with cache: around the carrier of
// its body, inner. Before the step's first attempt of an invocation it looks
// the step up in the store: a hit restores the outputs and ends the attempt
// with the earlier run's result (no STEP_START: nothing ran); a miss, or a
// restore that fails, hands the attempt to inner, and a success is saved
// once its STEP_END is durable.
type cached struct {
	r     *taskRun
	inner carrier
}

func (c cached) begin(ctx context.Context, at *attemptRun) error {
	r, n := c.r, at.n
	pr, err := r.probe(n)
	if err != nil {
		return c.inner.begin(ctx, at) // the attempt fails on the same error
	}
	at.cache, at.pre = pr, &pr.prepared
	// A step --resume-from or --only names to run again runs: its result
	// is what is in question.
	if n.attempts == 0 && !r.ro.NoCache && !r.sc.rerun[n.id()] {
		if pr.unreadable != "" {
			r.rep.Event(n.id(), "not from the cache: "+r.mask.String(pr.unreadable)+"; its result will not be saved")
			return c.inner.begin(ctx, at)
		}
		e, why := lookupCache(r.store, r.t.p.TaskName, n.rs, pr, r.mask)
		if e != nil {
			at.retry, at.input, at.cachedFrom, at.endDurable = max(n.retry-1, 0), pr.input, e.TaskID, true
			at.hit = e
			return nil
		}
		r.rep.Event(n.id(), "not from the cache: "+r.mask.String(why))
	}
	return c.inner.begin(ctx, at)
}

func (c cached) carry(ctx context.Context, at *attemptRun) (executor.Result, error) {
	if at.hit != nil {
		if res, ok := c.r.restore(at); ok {
			return res, nil
		}
		at.hit, at.cachedFrom, at.endDurable = nil, "", false
		if err := c.inner.begin(ctx, at); err != nil {
			return executor.Result{}, err
		}
		if at.lateErr != nil {
			return c.r.notStarted(at, at.lateErr)
		}
		if at.done != nil {
			return executor.Result{}, nil
		}
	}
	return c.inner.carry(ctx, at)
}

func (c cached) endLeftovers(n *node) string {
	if l, ok := c.inner.(leftovers); ok {
		return l.endLeftovers(n)
	}
	return ""
}

func (c cached) ended(at *attemptRun, d nodeDone) {
	if e, ok := c.inner.(ender); ok {
		e.ended(at, d)
	}
	if at.hit == nil && at.cache != nil && d.status == eventlog.Success && d.logErr == nil {
		c.r.saveCache(at.n, at.cache)
	}
}

// restore brings back the outputs of the entry a cache hit takes its
// result from, and returns that result. It reports false when one cannot
// be restored: the step must run.
func (r *taskRun) restore(at *attemptRun) (executor.Result, bool) {
	s, e := at.n.rs.step, at.hit
	dir := r.stepDir(s)
	restored := 0
	for _, f := range e.Outputs {
		changed, err := r.store.Restore(dir, f)
		if err != nil {
			r.rep.Event(s.ID, r.mask.String(fmt.Sprintf("not from the cache: %s cannot be restored: %v", f.Path, err)))
			return executor.Result{}, false
		}
		if changed {
			restored++
		}
	}
	r.e.crash("cache:restored")
	msg := "cached from " + e.TaskID
	if len(e.Outputs) > 0 {
		msg += fmt.Sprintf(" (output files: %d restored, %d unchanged)", restored, len(e.Outputs)-restored)
	}
	return executor.Result{Output: e.Output, OutputDigest: e.OutputDigest, Note: msg}, true
}

// saveCache saves n's result, which the attempt probed as pr made, once
// its STEP_END is durable: the outputs' blobs, then the entry. A result
// that cannot be saved is reported, and the run goes on.
func (r *taskRun) saveCache(n *node, pr *cacheProbe) {
	s := n.rs.step
	if r.w.Sync() != nil {
		return // the writer's error stops the run
	}
	warn := func(format string, args ...any) {
		msg := r.mask.String(fmt.Sprintf(format, args...)) + "; its result is not cached"
		fmt.Fprintf(r.e.opts.Stderr, "apollo: step %s: %s\n", s.ID, msg)
		// The log says it too: a nightly run's stderr is seldom read.
		// (A write error stops the run at its next durable append.)
		_ = r.w.AppendUnsynced(&eventlog.Record{EventType: eventlog.Warning, StepID: s.ID, Status: eventlog.Running,
			Message: msg})
	}
	if pr.unreadable != "" {
		warn("%s", pr.unreadable)
		return
	}
	if r.mask != nil && len(n.output) > 0 && r.mask.String(string(n.output)) != string(n.output) {
		warn("its output holds a secret, which apollo never writes")
		return
	}
	dir := r.stepDir(s)
	files := make([]cache.File, 0, len(n.rs.cache.outputs))
	for _, p := range n.rs.cache.outputs {
		f, err := r.store.Save(dir, p)
		if err != nil {
			warn("output %s: %v", p, err)
			return
		}
		f.Path = r.mask.String(p) // the entry names a secret as the log does
		files = append(files, f)
	}
	inputs := make([]cache.File, len(pr.inputs))
	for i, f := range pr.inputs {
		f.Path = r.mask.String(f.Path)
		inputs[i] = f
	}
	e := &cache.Entry{Key: pr.key, TaskName: r.t.p.TaskName, Step: s.ID, TaskID: r.t.id,
		Created: r.e.opts.Clock.Now().UTC(), InputDigest: pr.input, DefinitionDigest: n.rs.defDigest,
		UserKeyDigest: userKeyDigest(n.rs.cache.key), Upstream: pr.upstream, Inputs: inputs,
		OutputDigest: n.outDigest, Output: n.output, Outputs: files}
	r.e.crash("cache:saved")
	if err := r.store.Put(e); err != nil {
		warn("%v", err)
	}
}

// userKeyDigest is what an entry keeps of a cache.key: its hash, since
// the key may hold a secret var ("" for no key).
func userKeyDigest(key string) string {
	if key == "" {
		return ""
	}
	return sha256Hex([]byte(key))
}

// planCache foresees, for a dry run, which steps with cache: a run would
// take from the cache: those whose upstream results the run will know
// before they start (kept from the log, or themselves from the cache).
type planCache struct {
	r       *taskRun        // for its task, options, step folders and store; it writes nothing
	mask    *textfmt.Masker // the secret vars, as the dry run masks them
	results map[string]*planResult
}

// planResult is a step's output as a run will know it.
type planResult struct {
	digest string
	output json.RawMessage
}

// decide turns ps into ActionCached when the store has the step's result,
// and otherwise says in ps.Cache why the step would run.
func (pc *planCache) decide(rs *renderedStep, st *eventlog.StepState, ps *PlanStep) {
	s := rs.step
	switch ps.Action {
	case ActionKeep:
		pc.results[s.ID] = &planResult{st.OutputDigest, st.Output}
		return
	case ActionSkip:
		pc.results[s.ID] = &planResult{}
		return
	case ActionRun, ActionRerun, ActionCleanRerun:
	default:
		return
	}
	if s.Cache == nil || s.Foreach != nil {
		return
	}
	r := pc.r
	switch {
	case r.ro.NoCache:
		ps.Cache = "--no-cache"
		return
	case r.ro.Hub.URLs != "":
		ps.Cache = "the cache is not used with --hub"
		return
	case r.sc.rerun[s.ID]:
		ps.Cache = "run again by " + r.sc.why
		return
	case len(r.t.p.Secrets) > 0:
		ps.Cache = "decided when it runs (its key holds the secrets, which a dry run does not read)"
		return
	}
	upstream := make(map[string]string, len(s.DependsOn)+len(s.OutputRefs))
	for _, id := range append(slices.Clip(s.DependsOn), s.OutputRefs...) {
		res := pc.results[id]
		if res == nil {
			ps.Cache = "decided when it runs, once step " + id + " has run"
			return
		}
		if d := r.t.p.Step(id); d != nil && d.Foreach != nil && d.Foreach.Output != "" {
			// A run's key holds the digests of the instances it makes,
			// which a dry run does not.
			ps.Cache = "decided when it runs, once the instances of step " + id + " have run"
			return
		}
		upstream[id] = res.digest
	}
	late, err := renderLate(rs, func(id string) json.RawMessage { return pc.results[id].output })
	if err != nil {
		ps.Cache = "decided when it runs: " + err.Error()
		return
	}
	pr := probeCache(late, upstream, "", r.stepDir(s))
	if pr.unreadable != "" {
		ps.Cache = pc.mask.String(pr.unreadable)
		return
	}
	e, why := lookupCache(r.store, r.t.p.TaskName, rs, pr, pc.mask)
	if e == nil {
		ps.Cache = pc.mask.String(why)
		return
	}
	ps.Action, ps.CachedFrom = ActionCached, e.TaskID
	dir := r.stepDir(s)
	for _, f := range e.Outputs {
		if !cache.Holds(dir, f) {
			ps.Restores = append(ps.Restores, pc.mask.String(f.Path))
		}
	}
	ps.Reason = "cached from " + e.TaskID + ": its inputs are unchanged"
	if s.When != "" {
		ps.Reason += " (if its when: holds)"
	}
	pc.results[s.ID] = &planResult{e.OutputDigest, e.Output}
}
