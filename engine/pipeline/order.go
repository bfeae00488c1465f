package pipeline

// TopoOrder returns step indexes in dependency order, ties broken by the
// order of the file. A file whose steps only depend on earlier ones (the
// usual way to write one) is already in that order.
func (p *Pipeline) TopoOrder() []int {
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

// Descendants returns id and every step that depends on it, transitively.
func (p *Pipeline) Descendants(id string) map[string]bool {
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

// Ancestors returns id and every step it depends on, transitively.
func (p *Pipeline) Ancestors(id string) map[string]bool {
	out := map[string]bool{id: true}
	queue := []string{id}
	for len(queue) > 0 {
		s := p.Step(queue[0])
		queue = queue[1:]
		if s == nil {
			continue
		}
		for _, d := range s.DependsOn {
			if !out[d] {
				out[d] = true
				queue = append(queue, d)
			}
		}
	}
	return out
}
