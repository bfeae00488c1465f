package engine

import (
	"container/heap"
	"slices"
)

// resourcePool counts the named resources steps hold while they run
// (resources: and uses_resource:). Only the scheduler's goroutine uses it.
// A step takes all its resources at once or none, so no step holds one
// while it waits for another: there is no deadlock.
type resourcePool struct {
	free    map[string]int
	waiting []*node // steps ready but for a resource, in the order they came
}

func newResourcePool(limits map[string]int) *resourcePool {
	free := make(map[string]int, len(limits))
	for name, n := range limits {
		free[name] = n
	}
	return &resourcePool{free: free}
}

// acquire takes n's resources and reports true, or, when one is taken up,
// keeps n waiting and reports false.
func (p *resourcePool) acquire(n *node) bool {
	names := n.rs.step.Resources
	for _, name := range names {
		if p.free[name] == 0 {
			p.waiting = append(p.waiting, n)
			return false
		}
	}
	for _, name := range names {
		p.free[name]--
	}
	n.holding = true
	return true
}

// release gives back n's resources, if it holds them, and moves the steps
// that waited for them back to ready.
func (p *resourcePool) release(n *node, ready *readyQueue) {
	if !n.holding {
		return
	}
	n.holding = false
	for _, name := range n.rs.step.Resources {
		p.free[name]++
	}
	waiting := p.waiting
	p.waiting = nil
	for _, w := range waiting {
		if slices.ContainsFunc(w.rs.step.Resources, func(name string) bool { return slices.Contains(n.rs.step.Resources, name) }) {
			heap.Push(ready, w) // it tries again in file order
		} else {
			p.waiting = append(p.waiting, w)
		}
	}
}
