package engine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	lua "github.com/yuin/gopher-lua"

	"apollo/engine/pipeline"
	"apollo/eventlog"
	"apollo/luart"
)

// A step's when: is a Lua expression evaluated in the sandbox when the step
// is ready to start, over ctx.vars, ctx.outputs and ctx.status (the states
// of the steps upstream of it). False (or nil) skips the step: its STEP_END
// says SKIPPED and why, so a resume keeps the decision. An error fails the
// step.

// whenLimits bound a condition: it is an expression, not a step.
const (
	whenTimeout  = 5 * time.Second
	whenMemoryMB = 64
)

// decideWhen evaluates n's condition. It reports run=true when the step
// runs; otherwise the step ends here, skipped or failed, and done is its end.
func (r *taskRun) decideWhen(ctx context.Context, n *node) (run bool, done nodeDone) {
	s := n.rs.step
	ok, err := r.evalWhen(ctx, n)
	if err == nil && ok {
		return true, nodeDone{}
	}
	status, msg := eventlog.Skipped, "when: "+s.When+" is false: skipped"
	if err != nil {
		status, msg = eventlog.Failed, "when: "+err.Error()
	}
	if err := r.endWithoutRunning(n, status, bounded(msg)); err != nil {
		return false, nodeDone{n: n, logErr: err}
	}
	// endWithoutRunning settled the node; the scheduler settles it again
	// from done, with the same status.
	d := nodeDone{n: n, status: status}
	if status == eventlog.Failed {
		d.err = fmt.Errorf("%s", msg)
	}
	return false, d
}

// evalWhen runs n's condition in a fresh sandboxed state.
func (r *taskRun) evalWhen(ctx context.Context, n *node) (bool, error) {
	s := n.rs.step
	ctx, cancel := context.WithTimeout(ctx, whenTimeout)
	defer cancel()
	rt := r.whenRuntime()
	st, err := rt.NewState(ctx, luart.StateOptions{MemoryLimitMB: whenMemoryMB})
	if err != nil {
		return false, err
	}
	defer st.Close()
	// Errors name the pipeline file's line when the expression's lines are
	// the file's, as those of a lua: body do.
	name, line := pipeline.InlineChunk(r.t.p.Path, s.ID, ".when", s.WhenLine)
	proto, err := st.CompileAt(name, pipeline.WhenChunk(s.When), line)
	if err != nil {
		return false, err
	}
	L := st.L()
	c := L.CreateTable(0, 4)
	vars := L.CreateTable(0, len(r.t.vars))
	for k, v := range r.t.vars {
		vars.RawSetString(k, lua.LString(v))
	}
	vars.RawSetString("step_id", lua.LString(s.ID))
	c.RawSetString("vars", vars)
	c.RawSetString("task_id", lua.LString(r.t.id))
	c.RawSetString("step_id", lua.LString(s.ID))
	outputs, status := L.CreateTable(0, len(n.deps)), L.CreateTable(0, len(n.deps))
	up := r.upstreamOutputs(n)
	for _, id := range slices.Sorted(maps.Keys(up)) {
		status.RawSetString(id, lua.LString(r.node(id).final))
		if raw := up[id]; len(raw) > 0 {
			v, err := luart.DecodeJSON(L, raw)
			if err != nil {
				return false, fmt.Errorf("output of step %q: %w", id, err)
			}
			outputs.RawSetString(id, v)
		}
	}
	c.RawSetString("outputs", outputs)
	c.RawSetString("status", status)
	L.SetGlobal("ctx", c)
	res, err := st.Call(L.NewFunctionFromProto(proto))
	if err != nil {
		return false, err
	}
	return len(res) > 0 && lua.LVAsBool(res[0]), nil
}

// whenRuntime is the Lua runtime of the run's conditions, made once.
func (r *taskRun) whenRuntime() *luart.Runtime {
	r.whenOnce.Do(func() { r.whenRT = luart.New(luart.Options{Root: r.e.opts.Workdir}) })
	return r.whenRT
}
