package engine

import (
	"apollo/engine/executor"
)

// Starting a shell costs more than most short steps do: fork, exec, the
// dynamic loader and the shell's own start, about 1 ms on a small VM. A
// shell step's process depends on nothing its dependencies produce (its
// command and environment are rendered when the pipeline loads), so the
// engine starts it while the last of its dependencies still runs, held
// before the body's first line exactly as any shell body is held until its
// STEP_START is on disk. When the dependency ends, the step's attempt takes
// the waiting shell; when it does not (the dependency failed, the run
// stopped), the shell is told to exit without running anything.

// warmShell is the held shell of a step's next attempt, being started or
// started ahead of the attempt.
type warmShell struct {
	ready chan struct{} // closed once ahead and err are set
	ahead executor.Ahead
	err   error
}

// warmUp starts, in the background, the held shell of a step that n's end
// would make ready: a shell step whose only unsettled dependency is n. One
// at most per started step, the one that would take its slot, so a run
// holds no more waiting shells than it runs steps. The scheduler calls it
// as it starts n, and through warmJoin. It reports whether it started one.
func (r *taskRun) warmUp(n *node) bool {
	if n.warmedChild || n.rs.step.Foreach != nil || r.hub != nil {
		return false // a foreach template's dependents wait for its instances too; a run with a hub starts no process here
	}
	starter, ok := r.e.opts.Executors["shell"].(executor.AheadStarter)
	if !ok {
		return false // a test's or another build's executor starts its own processes
	}
	for _, c := range n.children {
		// c.started first: a started step's fields belong to its step goroutine.
		if c.started || c.waiting != 1 || c.warm != nil || c.blocked || c.final != "" ||
			c.rs.step.Command == "" || c.rs.lateVars != nil || c.dirty || c.unclean || c.plan.WaitMS > 0 ||
			c.rs.step.Cache != nil || // its result may come from the cache: it may run nothing
			c.rs.step.Container != nil { // its engine starts it, not a held shell
			continue
		}
		w := &warmShell{ready: make(chan struct{})}
		retry := c.retry
		c.warm = w
		n.warmedChild = true
		go func() {
			defer close(w.ready)
			w.ahead, w.err = starter.StartAhead(r.newAttempt(c, c.rs, retry))
		}()
		return true
	}
	return false
}

// warmJoin is called by the scheduler when all of c's dependencies but one
// have settled: if that one has started, c may be the step its end makes
// ready (a join), so its shell can be started now.
func (r *taskRun) warmJoin(c *node) {
	for _, d := range c.deps {
		if !d.satisfies() {
			if d.started && d.final == "" {
				r.warmUp(d)
			}
			return
		}
	}
}

// takeWarm returns the attempt, its held shell started, that warmUp made
// for n's next attempt, or nil when there is none. warmUp makes one only
// for a step that has not started, and the first attempt takes it, so it
// is always for that attempt.
func (r *taskRun) takeWarm(n *node) executor.Ahead {
	w := n.warm
	if w == nil {
		return nil
	}
	n.warm = nil
	<-w.ready
	if w.err != nil {
		return nil // the attempt starts its shell itself, and reports any error
	}
	if !w.ahead.Usable() {
		// A dependency replaced the workspace folder itself while the
		// shell waited in the old one: it has run nothing, and a shell
		// started now runs where a step started at once would.
		w.ahead.Close()
		return nil
	}
	return w.ahead
}

// dropWarm ends the held shells no attempt took, once the scheduler is done.
func (r *taskRun) dropWarm() {
	for _, n := range r.nodes {
		r.dropWarmOf(n)
	}
}

// dropWarmOf ends n's held shell, if it has one: n will not run (it is
// blocked), or not in this invocation. The shell has run nothing.
func (r *taskRun) dropWarmOf(n *node) {
	if w := n.warm; w != nil {
		n.warm = nil
		<-w.ready
		if w.ahead != nil {
			w.ahead.Close()
		}
	}
}
