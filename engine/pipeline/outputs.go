package pipeline

import (
	"regexp"
	"slices"
	"sync"
)

// A step reads the outputs of the steps upstream of it — its ancestors in
// the graph — by id: a shell command or its env through {{outputs.STEP}}
// and {{outputs.STEP.KEY}} placeholders, Lua through ctx.outputs.STEP.
// Validation checks that each step so named is an ancestor, and records,
// on the Step, the ancestors it names beyond its direct dependencies.

// outputRef is one reference to an upstream step's output.
type outputRef struct {
	si   *stepInfo
	key  string // the key it is written under: command, env.X, lua...
	step string // the step it names
	text string // as written, for messages
	line int
}

// outputRef records a reference for checkOutputRefs; outside a step, or
// outside a shell command or its env, it is an error at once.
func (w where) outputRef(key, step, text string, line int) {
	switch {
	case w.si == nil:
		w.errf(line, "%s: %s names a step's output, which only a step's own command, env or Lua can read", key, text)
	case key == "with" || len(key) > 5 && key[:5] == "with.":
		w.errf(line, "%s: %s: a Lua step reads upstream outputs as ctx.outputs, not through with", key, text)
	default:
		w.l.outputRefs = append(w.l.outputRefs, outputRef{si: w.si, key: key, step: step, text: text, line: line})
	}
}

// luaRef matches ctx.outputs.ID and ctx.outputs["ID"] (or 'ID') in Lua,
// and the same of ctx.status, an upstream step's state (when:).
var luaRef = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`\bctx\.(?:outputs|status)(?:\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*["']([A-Za-z0-9_-]+)["']\s*\])`)
})

// luaSourceRef is one ctx.outputs reference found in Lua source.
type luaSourceRef struct {
	step, text string
	off        int // byte offset in the source
}

// luaOutputRefs finds the steps a Lua source names as ctx.outputs.ID or
// ctx.outputs["ID"]. A name computed at run time is not found: it reads
// nil unless the step is upstream.
func luaOutputRefs(src string) []luaSourceRef {
	var refs []luaSourceRef
	for _, m := range luaRef().FindAllStringSubmatchIndex(src, -1) {
		r := luaSourceRef{text: src[m[0]:m[1]], off: m[0]}
		if m[2] >= 0 {
			r.step = src[m[2]:m[3]]
		} else {
			r.step = src[m[4]:m[5]]
		}
		refs = append(refs, r)
	}
	return refs
}

// checkOutputRefs checks that every step named for its output is an
// ancestor of the step that names it, and records on each step the
// ancestors it names beyond its dependencies (Step.OutputRefs).
func (l *loader) checkOutputRefs(ids map[string]int32) {
	ancestors := map[*stepInfo]map[int32]bool{}
	for _, r := range l.outputRefs {
		s := r.si.s
		j, known := ids[r.step]
		if !known {
			r.si.at.errf(r.line, "%s: %s names no step of the pipeline%s", r.key, r.text, l.hint(r.step, stepIDs(l.steps)))
			continue
		}
		up, ok := ancestors[r.si]
		if !ok {
			up = l.ancestorsOf(r.si)
			ancestors[r.si] = up
		}
		if !up[j] {
			r.si.at.errf(r.line, "%s: %s reads the output of step %q, which is not upstream of %q; "+
				"add it to depends_on (directly or through a step it depends on)", r.key, r.text, r.step, s.ID)
			continue
		}
		if !slices.Contains(s.DependsOn, r.step) && !slices.Contains(s.OutputRefs, r.step) {
			s.OutputRefs = append(s.OutputRefs, r.step)
		}
	}
}

// ancestorsOf returns the indexes (in l.steps) of every step that si
// depends on, directly or not.
func (l *loader) ancestorsOf(si *stepInfo) map[int32]bool {
	up := map[int32]bool{}
	queue := slices.Clone(si.s.depIdx)
	for len(queue) > 0 {
		j := queue[0]
		queue = queue[1:]
		if up[j] {
			continue
		}
		up[j] = true
		queue = append(queue, l.steps[j].s.depIdx...)
	}
	return up
}

func stepIDs(steps []*stepInfo) []string {
	ids := make([]string, 0, len(steps))
	for _, si := range steps {
		ids = append(ids, si.s.ID)
	}
	return ids
}
