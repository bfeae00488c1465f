package engine

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxTaskIDLen keeps file names built from a task id well under NAME_MAX.
const maxTaskIDLen = 200

// ValidTaskID reports whether id may name a task: [A-Za-z0-9_.-]+, not "."
// or "..", not starting with "-" (it would read as an option), at most 200
// bytes. A task id names files and folders.
func ValidTaskID(id string) error {
	switch {
	case id == "":
		return errors.New("task id is empty")
	case len(id) > maxTaskIDLen:
		return fmt.Errorf("task id is %d bytes; the limit is %d", len(id), maxTaskIDLen)
	case id == "." || id == "..":
		return fmt.Errorf("task id %q is not allowed: it names a folder", id)
	case !validName(id, "."):
		return fmt.Errorf("task id %q may only hold letters, digits, \"_\", \".\" and \"-\"", snippet(id))
	case id[0] == '-':
		return fmt.Errorf("task id %q must not start with \"-\"", id)
	}
	return nil
}

// validName reports whether s is non-empty and holds only ASCII letters,
// digits, "_", "-" and the bytes in extra.
func validName(s, extra string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isNameChar(int(c)) && c != '-' && strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// validModuleName matches [A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*.
func validModuleName(s string) bool {
	for part := range strings.SplitSeq(s, ".") {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			if !isNameChar(int(part[i])) {
				return false
			}
		}
	}
	return true
}

// localPath returns what is wrong with a path that must stay inside the
// pipeline's folder, or "".
func localPath(p string) string {
	if filepath.IsAbs(p) || strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) {
		return "must be relative to the pipeline's folder, not absolute"
	}
	if !filepath.IsLocal(p) {
		return "leaves the pipeline's folder; keep it inside"
	}
	return ""
}

// setKnown computes the template variables a step may use.
func (l *loader) setKnown() {
	l.known = map[string]bool{}
	l.knownList = nil
	add := func(names []string) {
		slices.Sort(names)
		for _, n := range names {
			if !l.known[n] {
				l.known[n] = true
				l.knownList = append(l.knownList, n)
			}
		}
	}
	add(BuiltinVars())
	var vars, opts []string
	for k := range l.p.Vars {
		vars = append(vars, k)
	}
	for k := range l.opts.Vars {
		opts = append(opts, k)
	}
	add(vars)
	add(opts)
}

// template checks a template held by node n: its placeholders, their
// variables and, for a shell command, their contexts.
func (w where) template(key string, n *yaml.Node, s string, shell bool) {
	segs, err := parseTemplate(s)
	if err != nil {
		te := err.(*templateError)
		w.errf(lineIn(n, s, te.off), "%s: %s", key, te.msg)
		return
	}
	reported := map[string]bool{}
	for _, sg := range segs {
		if sg.name == "" || w.l.known[sg.name] || reported[sg.name] {
			continue
		}
		reported[sg.name] = true
		hint := w.l.hint(sg.name, w.l.knownList)
		if hint == "" {
			hint = fmt.Sprintf("; define it under vars: or pass --var %s=VALUE", sg.name)
		}
		w.errf(lineIn(n, s, sg.off), "%s: unknown template variable {{%s}}%s", key, sg.name, hint)
	}
	if !shell {
		return
	}
	if _, err := shellContexts(segs); err != nil {
		te := err.(*templateError)
		w.errf(lineIn(n, s, te.off), "%s: %s", key, te.msg)
	}
}

// lineIn is the line of byte off of s, the value of n: exact for a literal
// block (|), else the line where the value starts.
func lineIn(n *yaml.Node, s string, off int) int {
	if n.Style&yaml.LiteralStyle != 0 && off <= len(s) {
		return n.Line + 1 + strings.Count(s[:off], "\n")
	}
	return n.Line
}

// validate checks what spans steps: ids, dependencies, cycles, resume_from.
func (l *loader) validate() {
	ids := map[string]*stepInfo{}
	var order []string
	for _, si := range l.steps {
		id := si.s.ID
		if id == "" {
			continue
		}
		if first, dup := ids[id]; dup {
			si.at.errf(si.s.Line, "id is already used on line %d; ids must be unique", first.s.Line)
			continue
		}
		ids[id] = si
		order = append(order, id)
	}
	for _, si := range l.steps {
		seen := map[string]bool{}
		for _, dn := range si.deps {
			dep, ok := si.at.text("depends_on", dn)
			if !ok {
				continue
			}
			switch {
			case dep == si.s.ID:
				si.at.errf(dn.Line, "depends on itself; remove %q from depends_on", dep)
			case seen[dep]:
				si.at.errf(dn.Line, "lists %q twice in depends_on; remove one", dep)
			case ids[dep] == nil:
				si.at.errf(dn.Line, "depends on unknown step %q%s", snippet(dep), l.hint(dep, order))
			default:
				si.s.DependsOn = append(si.s.DependsOn, dep)
			}
			seen[dep] = true
		}
	}
	l.cycles(ids)
	if r := l.p.ResumeFrom; r != "" && ids[r] == nil {
		where{l: l}.errf(l.resumeLine, "resume_from names unknown step %q%s", snippet(r), l.hint(r, order))
	}
}

// cycles reports each dependency cycle once, naming its steps in order.
func (l *loader) cycles(ids map[string]*stepInfo) {
	index := map[*stepInfo]int{}
	for i, si := range l.steps {
		index[si] = i
	}
	n := len(l.steps)
	deps := make([][]int, n)
	pending := make([]int, n)
	dependents := make([][]int, n)
	for i, si := range l.steps {
		for _, d := range si.s.DependsOn {
			j := index[ids[d]]
			deps[i] = append(deps[i], j)
			dependents[j] = append(dependents[j], i)
			pending[i]++
		}
	}
	// Kahn: whatever is left waits, directly or not, on a cycle.
	var queue []int
	for i := range n {
		if pending[i] == 0 {
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, d := range dependents[v] {
			if pending[d]--; pending[d] == 0 {
				queue = append(queue, d)
			}
		}
	}
	// Each left step has a left dependency: follow the first until a step
	// repeats. A walk that meets an earlier walk leads to a known cycle.
	walkOf := make([]int, n)
	walk := 0
	for i := range n {
		if pending[i] == 0 || walkOf[i] != 0 {
			continue
		}
		walk++
		var path []int
		pos := map[int]int{}
		v := i
		for walkOf[v] == 0 {
			walkOf[v] = walk
			pos[v] = len(path)
			path = append(path, v)
			for _, d := range deps[v] {
				if pending[d] > 0 {
					v = d
					break
				}
			}
		}
		if walkOf[v] != walk {
			continue
		}
		cycle := path[pos[v]:]
		first := slices.Index(cycle, slices.Min(cycle))
		cycle = slices.Concat(cycle[first:], cycle[:first])
		names := make([]string, 0, len(cycle)+1)
		for _, c := range cycle {
			names = append(names, l.steps[c].s.ID)
		}
		names = append(names, names[0])
		head := l.steps[cycle[0]]
		head.at.errf(head.s.Line, "dependency cycle %s (each step depends on the next); remove one of these dependencies", strings.Join(names, " -> "))
	}
}
