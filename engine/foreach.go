package engine

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// A step with foreach: {output: STEP[.KEY]} learns its items from an
// upstream output, so its instances are made when it runs. The template
// then runs no body: its attempt reads the list and ends SUCCESS with the
// items as its output. That STEP_END is the expansion's record: a resume
// rebuilds the same instances from it (buildNodes), whatever the upstream
// output has become since. The scheduler adds the instances to the graph
// as the template ends; its dependents wait for every one.

// expansion carries the attempts of a foreach template: its body is the
// expansion itself. Its upstream outputs are not rendered into it: each
// instance renders its own.
type expansion struct{ r *taskRun }

func (c expansion) begin(_ context.Context, at *attemptRun) error {
	if err := c.r.appendStart(at, nil); err != nil {
		return err
	}
	at.lateErr = nil
	return nil
}

func (c expansion) carry(_ context.Context, at *attemptRun) (executor.Result, error) {
	if err := at.a.Started(0); err != nil {
		return executor.Result{}, err
	}
	return c.r.expandBody(at.n), nil
}

// expandBody is the attempt of a foreach template: its items, as output.
func (r *taskRun) expandBody(n *node) executor.Result {
	items, err := r.dynamicItems(n)
	if err != nil {
		return executor.Result{Err: err, ExitCode: -1}
	}
	out, err := json.Marshal(items)
	if err != nil {
		return executor.Result{Err: err, ExitCode: -1}
	}
	return executor.Result{Output: out, OutputDigest: sha256Hex(out),
		Note: fmt.Sprintf("expanded into %d instance(s)", len(items))}
}

// dynamicItems reads the items of n's foreach: the upstream output, a list
// of strings or numbers (a key of it, for STEP.KEY).
func (r *taskRun) dynamicItems(n *node) ([]string, error) {
	f := n.rs.step.Foreach
	step, key, _ := strings.Cut(f.Output, ".")
	up := r.node(step)
	raw := up.output
	if len(raw) == 0 {
		return nil, fmt.Errorf("foreach: step %q published no output", step)
	}
	if key != "" {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return nil, fmt.Errorf("foreach: the output of step %q is not an object with keys", step)
		}
		v, ok := m[key]
		if !ok {
			return nil, fmt.Errorf("foreach: the output of step %q has no key %q", step, key)
		}
		raw = v
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) != nil {
		return nil, fmt.Errorf("foreach: %s is not a list", f.Output)
	}
	if limit := r.t.p.InstanceLimit(); len(list) > limit {
		return nil, fmt.Errorf("foreach: %s lists %d items, more than max_instances (%d); make it shorter, or raise max_instances: at the top level", f.Output, len(list), limit)
	}
	items := make([]string, len(list))
	for i, v := range list {
		var s string
		var num json.Number
		switch {
		case json.Unmarshal(v, &s) == nil:
		case json.Unmarshal(v, &num) == nil:
			s = num.String()
		default:
			return nil, fmt.Errorf("foreach: item %d of %s is %s, not a string or a number", i+1, f.Output, string(v))
		}
		items[i] = s
	}
	if !r.secretItems(items) {
		seen := map[string]bool{}
		for _, s := range items {
			id := pipeline.InstanceID(n.id(), s)
			if seen[id] {
				return nil, fmt.Errorf("foreach: two items of %s make the instance id %s", f.Output, id)
			}
			seen[id] = true
		}
	} else if up.outputKept {
		return nil, fmt.Errorf("foreach: the output of step %q held a secret, which the log does not keep; run again with --resume-from %s", step, step)
	}
	return items, nil
}

// secretItems reports whether a foreach's items hold a secret: then its
// instances are named by index (docs/spec.md §2.9). An item read back from
// the log, where the secret is ***, counts too, so a resume names the
// instances as the run that made them did.
func (r *taskRun) secretItems(items []string) bool {
	if r.mask == nil {
		return false
	}
	return slices.ContainsFunc(items, func(v string) bool { return strings.Contains(r.mask.String(v), textfmt.Masked) })
}

// lostItem says why a foreach instance cannot run: its item was a secret,
// which the log keeps as ***, and step made it.
func lostItem(step string) error {
	return fmt.Errorf("its item held a secret, which the log does not keep; run again with --resume-from %s", step)
}

// instancesOf makes the nodes of the instances a template's output lists,
// their state replayed from the log, and makes each of the template's
// dependents wait for them too. It returns them. kept says the output was
// read back from the log: items that held a secret are *** there, and an
// instance that has yet to run with one is refused.
func (r *taskRun) instancesOf(n *node, output json.RawMessage, kept bool) ([]*node, error) {
	var values []string
	if err := json.Unmarshal(output, &values); err != nil {
		return nil, fmt.Errorf("step %s: its recorded expansion does not read back: %w", n.id(), err)
	}
	s := n.rs.step
	secret := r.secretItems(values)
	upstream, _, _ := strings.Cut(s.Foreach.Output, ".")
	var insts []*node
	for i, v := range values {
		inst := s.Instance(map[string]string{"item": v})
		if secret {
			inst = s.SecretInstance(map[string]string{"item": v}, i)
		}
		rendered, err := renderSteps(&pipeline.Pipeline{Path: r.t.p.Path, Steps: []*pipeline.Step{inst}}, r.t.vars)
		if err != nil {
			return nil, err
		}
		if n.rs.filesDigest != "" { // the template's Lua files, read when the run began
			rendered[0].sources, rendered[0].filesDigest = n.rs.sources, n.rs.filesDigest
			rendered[0].defDigest = definitionDigest(rendered[0])
		}
		st := r.snap.step(inst.ID) // other steps are running: their records change the state
		plan := decide(inst, &st, r.sc, r.t.p.MaxDirtyRestarts, r.e.opts.Clock.Now())
		plan.ID = inst.ID
		in := r.newNode(rendered[0], len(r.nodes), &st, plan)
		switch {
		case kept && secret && strings.Contains(v, textfmt.Masked):
			in.refused = lostItem(upstream)
		case inst.Run != "":
			in.refused = checkChildID(r.t.p, inst, r.t.id, r.t.children)
		}
		in.deps = n.deps
		for _, c := range n.children {
			in.children = append(in.children, c)
			c.deps = append(c.deps, in)
		}
		r.nodes = append(r.nodes, in)
		r.byIDMu.Lock()
		r.byID[inst.ID] = in
		r.byIDMu.Unlock()
		insts = append(insts, in)
	}
	return insts, nil
}

// expanded adds the instances of a foreach template that just ended well
// to the graph, and queues those that can run.
func (s *scheduler) expanded(n *node, output json.RawMessage, kept bool) {
	insts, err := s.r.instancesOf(n, output, kept)
	if err != nil {
		// The template's own STEP_END is written; an expansion that does
		// not read back is the log's problem: stop.
		s.logErr, s.stopping = err, true
		return
	}
	for _, in := range insts {
		for _, c := range n.children {
			if in.final == "" || !in.satisfies() {
				c.waiting++
			}
		}
		if in.final == "" && !in.blocked {
			heap.Push(&s.ready, in)
		}
		if in.final == eventlog.Failed && !in.rs.step.Optional {
			s.r.block(in)
		}
	}
}
