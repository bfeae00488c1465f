package pipeline

import (
	"fmt"
	"strings"
)

// Expansion bounds (docs/spec.md §2.9). A foreach or matrix step is
// counted before anything is expanded, so that a small file naming a huge
// matrix is a validation error, not a run out of memory.
const (
	// DefaultMaxInstances is the most instances one foreach or matrix
	// step makes, unless max_instances: says otherwise.
	DefaultMaxInstances = 10_000
	// DefaultMaxSteps is the most steps a pipeline has once its foreach
	// and matrix steps are expanded, unless max_steps: says otherwise.
	DefaultMaxSteps = 100_000
	// maxBound is the highest either bound may be set to.
	maxBound = 1_000_000
)

// count returns how many instances f makes from what is known before the
// run, saturating at maxBound+1 so that no product overflows: a matrix's
// combinations (counted before exclude:), a literal list, or a var's list
// (vars nil: not known yet, 0). An output's list is known only when the
// step runs (0).
func (f *Foreach) count(vars map[string]string) int {
	switch {
	case f.Matrix != nil:
		n := 1
		for _, a := range f.Matrix {
			if len(a.Values) == 0 {
				return 0
			}
			if n > (maxBound+1)/len(a.Values) {
				return maxBound + 1
			}
			n *= len(a.Values)
		}
		return n
	case f.Var != "":
		return len(strings.FieldsFunc(vars[f.Var], isItemSep))
	}
	return len(f.Items)
}

// isItemSep reports whether r separates the items of a foreach var.
func isItemSep(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }

// TooManyInstances is the message for a foreach or matrix (kind) that
// makes n instances, more than limit.
func TooManyInstances(kind string, n, limit int) string {
	count := fmt.Sprint(n)
	if n > maxBound {
		count = fmt.Sprintf("more than %d", maxBound)
	}
	return fmt.Sprintf("%s makes %s instances, more than max_instances (%d); make it smaller, or raise max_instances: at the top level (at most %d)",
		kind, count, limit, maxBound)
}

// tooManySteps is the message for a pipeline of n steps once expanded,
// more than limit.
func tooManySteps(n, limit int) string {
	return fmt.Sprintf("the pipeline makes %d steps once its foreach and matrix steps are expanded, more than max_steps (%d); make them smaller, or raise max_steps: at the top level (at most %d)",
		n, limit, maxBound)
}

// kind names how f expands, for messages.
func (f *Foreach) kind() string {
	if f.Matrix != nil {
		return "matrix"
	}
	return "foreach"
}

// checkBounds counts, before anything is expanded, the instances of each
// step whose items the file lists (a literal list, a matrix) against
// max_instances, and the pipeline's steps against max_steps. A var's list
// is counted when the task is planned (Expand), an output's when the step
// runs.
func (l *loader) checkBounds() {
	maxInst, maxSteps := l.p.InstanceLimit(), l.p.stepLimit()
	total, over := 0, false
	for _, si := range l.steps {
		f := si.s.Foreach
		if f == nil {
			total++
			continue
		}
		n := f.count(nil)
		if n > maxInst {
			si.at.errf(f.Line, "%s", TooManyInstances(f.kind(), n, maxInst))
			over = true
		}
		total = min(total+n, maxBound+1)
	}
	if total > maxSteps && !over {
		where{l: l}.errf(l.stepsLine, "%s", tooManySteps(total, maxSteps))
	}
}

// InstanceLimit is max_instances: the most instances one foreach or
// matrix step makes (DefaultMaxInstances when the file does not set it).
func (p *Pipeline) InstanceLimit() int {
	if p.MaxInstances > 0 {
		return p.MaxInstances
	}
	return DefaultMaxInstances
}

// stepLimit is max_steps, DefaultMaxSteps when unset.
func (p *Pipeline) stepLimit() int {
	if p.MaxSteps > 0 {
		return p.MaxSteps
	}
	return DefaultMaxSteps
}

// checkBounds is checkBounds of the loader with the task's vars known: a
// var's list is counted too, before any instance is made.
func (p *Pipeline) checkBounds(vars map[string]string) error {
	maxInst, maxSteps := p.InstanceLimit(), p.stepLimit()
	total := 0
	for _, s := range p.Steps {
		f := s.Foreach
		if f == nil {
			total++
			continue
		}
		n := f.count(vars)
		if n > maxInst {
			return &Error{File: p.Path, Line: f.Line, Step: s.ID, Msg: TooManyInstances(f.kind(), n, maxInst)}
		}
		total = min(total+n, maxBound+1)
		if total > maxSteps {
			return &Error{File: p.Path, Line: f.Line, Step: s.ID, Msg: tooManySteps(total, maxSteps)}
		}
	}
	if total > maxSteps {
		return &Error{File: p.Path, Msg: tooManySteps(total, maxSteps)}
	}
	return nil
}
