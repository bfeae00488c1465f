package pipeline

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"apollo/engine/template"
)

// Foreach makes a step the template of instances, one per item: a literal
// list, the items of a var, an upstream step's output (known when it runs),
// or a matrix of lists. Each instance is a step of its own, named
// ID[item] (ID[a,b] for a matrix), with its own attempts; steps that
// depend on the template depend on every instance (docs/spec.md §2.10).
type Foreach struct {
	Items  []string // a literal list
	Var    string   // a var whose value lists the items, separated by commas or spaces
	Output string   // "STEP" or "STEP.KEY": an upstream output that is a list
	// Matrix is every combination of its axes' values, less Exclude.
	Matrix  []Axis
	Exclude []map[string]string
	// Line is the line of the foreach: or matrix: key, for messages.
	Line int
}

// Axis is one list of a matrix.
type Axis struct {
	Name   string
	Values []string
}

// instanceChars are the bytes an item keeps in an instance id; others
// become "_".
var instanceChars = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9_.-]`) })

// InstanceID names the instance of step id for item values (one, or one
// per matrix axis).
func InstanceID(id string, values ...string) string {
	parts := make([]string, len(values))
	for i, v := range values {
		parts[i] = instanceChars().ReplaceAllString(v, "_")
	}
	return id + "[" + strings.Join(parts, ",") + "]"
}

// IndexID names the instance at index i (from 0) of the items of step id:
// the name of instances whose items hold a secret, which an id, written
// everywhere, must not carry.
func IndexID(id string, i int) string { return id + "[" + strconv.Itoa(i) + "]" }

// foreach decodes foreach: a list of items, {var: NAME} or {output: STEP[.KEY]}.
func (si *stepInfo) foreach(kv keyValue) {
	v := deref(kv.v)
	f := &Foreach{Line: kv.k.Line}
	switch v.Kind {
	case yaml.SequenceNode:
		items, _ := si.at.list(kv.key, "items", v)
		for _, item := range items {
			if s, ok := si.at.nonEmpty(kv.key, item); ok {
				f.Items = append(f.Items, s)
			}
		}
		if len(items) == 0 {
			si.at.errf(v.Line, "foreach is empty; list at least one item")
		}
	case yaml.MappingNode:
		kvs := si.at.pairs(v)
		if len(kvs) != 1 || (kvs[0].key != "var" && kvs[0].key != "output") {
			si.at.errf(v.Line, "foreach takes a list of items, {var: NAME} or {output: STEP} (or STEP.KEY)")
			return
		}
		name, ok := si.at.nonEmpty("foreach."+kvs[0].key, kvs[0].v)
		if !ok {
			return
		}
		if kvs[0].key == "var" {
			if !template.ValidName(name) {
				si.at.errf(deref(kvs[0].v).Line, "foreach.var %q is not a variable name", snippet(name))
				return
			}
			f.Var = name
			si.l.foreachVars = append(si.l.foreachVars, varRef{si: si, name: name, line: deref(kvs[0].v).Line})
		} else {
			step, key, _ := strings.Cut(name, ".")
			f.Output = name
			si.at.outputRef("foreach.output", step, name, deref(kvs[0].v).Line)
			_ = key
		}
	default:
		si.at.errf(v.Line, "foreach takes a list of items, {var: NAME} or {output: STEP}, not %s", describe(v))
		return
	}
	si.s.Foreach = f
}

// matrix decodes matrix: a mapping of axis names to lists of values.
func (si *stepInfo) matrix(kv keyValue) {
	kvs, ok := si.at.mapping(kv.key, kv.v)
	if !ok {
		return
	}
	if len(kvs) == 0 {
		si.at.errf(deref(kv.v).Line, "matrix is empty; give at least one axis, like matrix: {region: [eu, us]}")
		return
	}
	f := &Foreach{Line: kv.k.Line}
	for _, p := range kvs {
		if !refName(p.key) {
			si.at.errf(p.k.Line, "matrix axis %q may only hold letters, digits, _ and -", snippet(p.key))
			continue
		}
		items, _ := si.at.list("matrix."+p.key, "values", p.v)
		axis := Axis{Name: p.key}
		for _, item := range items {
			if s, ok := si.at.nonEmpty("matrix."+p.key, item); ok {
				axis.Values = append(axis.Values, s)
			}
		}
		if len(items) == 0 {
			si.at.errf(p.k.Line, "matrix.%s is empty; list at least one value", p.key)
		}
		f.Matrix = append(f.Matrix, axis)
	}
	si.s.Foreach = f
}

// exclude decodes exclude: combinations of matrix values left out.
func (si *stepInfo) exclude(kv keyValue) {
	items, _ := si.at.list(kv.key, "combinations", kv.v)
	for _, item := range items {
		kvs, ok := si.at.mapping(kv.key, item)
		if !ok {
			continue
		}
		m := map[string]string{}
		for _, p := range kvs {
			if s, ok := si.at.text("exclude."+p.key, p.v); ok {
				m[p.key] = s
			}
		}
		si.excludes = append(si.excludes, excludeAt{m: m, line: item.Line})
	}
}

type excludeAt struct {
	m    map[string]string
	line int
}

// refName reports whether s is letters, digits, _ and -.
func refName(s string) bool { return s != "" && validName(s, "") }

// varRef is a foreach: {var: NAME}, checked once every var is known.
type varRef struct {
	si   *stepInfo
	name string
	line int
}

// checkForeach checks a step's foreach, matrix and exclude against each
// other, and its {{item}} placeholders against them.
func (l *loader) checkForeach(si *stepInfo) {
	fl, hasF := si.lineOf("foreach")
	ml, hasM := si.lineOf("matrix")
	el, hasE := si.lineOf("exclude")
	switch {
	case hasF && hasM:
		si.at.errf(ml, "has both foreach and matrix; keep one")
	case hasE && !hasM:
		si.at.errf(el, "exclude applies to a matrix; add matrix: or remove exclude")
	}
	if hasM && si.s.Foreach != nil {
		checkExcludes(si)
	}
	checkItemRefs(si, hasF, hasM)
	if hasF && si.s.Foreach != nil && len(si.s.Foreach.Items) > 0 {
		checkInstanceIDs(si, fl)
	}
}

// checkExcludes checks that each exclude: entry names axes and values of
// the matrix, and keeps them.
func checkExcludes(si *stepInfo) {
	f := si.s.Foreach
	f.Exclude = nil
	for _, e := range si.excludes {
		for k, v := range e.m {
			i := slices.IndexFunc(f.Matrix, func(a Axis) bool { return a.Name == k })
			switch {
			case i < 0:
				si.at.errf(e.line, "exclude names %q, which is not an axis of the matrix", k)
			case !slices.Contains(f.Matrix[i].Values, v):
				si.at.errf(e.line, "exclude: %s %q is not a value of matrix.%s", k, v, k)
			}
		}
		f.Exclude = append(f.Exclude, e.m)
	}
}

// checkItemRefs checks the step's {{item}} and {{item.NAME}} placeholders
// against its foreach or matrix.
func checkItemRefs(si *stepInfo, hasF, hasM bool) {
	for _, r := range si.itemRefs {
		axis, isAxis := template.ItemRef(r.name)
		switch {
		case !hasF && !hasM:
			si.at.errf(r.line, "%s: {{%s}} is the item of a foreach or matrix step; this step has neither", r.key, r.name)
		case hasF && isAxis:
			si.at.errf(r.line, "%s: {{%s}}: a foreach step's item is {{item}}; {{item.NAME}} is for matrix steps", r.key, r.name)
		case hasM && !isAxis:
			si.at.errf(r.line, "%s: {{item}}: a matrix step reads each axis as {{item.NAME}}", r.key)
		case hasM && si.s.Foreach != nil && !slices.ContainsFunc(si.s.Foreach.Matrix, func(a Axis) bool { return a.Name == axis }):
			si.at.errf(r.line, "%s: {{%s}}: the matrix has no axis %q", r.key, r.name, axis)
		}
	}
}

// checkInstanceIDs checks that a literal foreach list makes one instance
// id per item.
func checkInstanceIDs(si *stepInfo, line int) {
	seen := map[string]string{}
	for _, it := range si.s.Foreach.Items {
		id := InstanceID(si.s.ID, it)
		if first, dup := seen[id]; dup {
			si.at.errf(line, "foreach items %q and %q make the same instance id %s; make them differ in letters, digits, _, . or -", first, it, id)
		}
		seen[id] = it
	}
}

// checkForeachVars checks that foreach: {var: NAME} names a declared var.
func (l *loader) checkForeachVars() {
	for _, r := range l.foreachVars {
		if _, ok := l.p.Vars[r.name]; ok {
			continue
		}
		if _, ok := l.opts.Vars[r.name]; ok {
			continue
		}
		r.si.at.errf(r.line, "foreach.var %q is not declared; declare it under vars: (a list separated by commas or spaces)", r.name)
	}
}

// itemRef is an {{item}} or {{item.NAME}} placeholder in a step.
type itemRef struct {
	key, name string
	line      int
}

// Expand returns the pipeline with each foreach or matrix step whose items
// are known before the run (a literal list, a var, a matrix) replaced by
// its instances, and each dependency on such a step by dependencies on
// every instance. vars are the task's variables, for foreach: {var: NAME}.
// A step whose items come from an upstream output stays as it is: the
// engine expands it when that output is known. A pipeline without such
// steps is returned as it is.
func (p *Pipeline) Expand(vars map[string]string) (*Pipeline, error) {
	if err := p.checkBounds(vars); err != nil {
		return nil, err
	}
	instances := map[string][]string{} // template id → instance ids
	var steps []*Step
	expanded := false
	for _, s := range p.Steps {
		if s.Foreach == nil || s.Foreach.Output != "" {
			steps = append(steps, s)
			continue
		}
		expanded = true
		items, err := s.Foreach.items(vars)
		if err != nil {
			return nil, &Error{File: p.Path, Line: s.Line, Step: s.ID, Msg: err.Error()}
		}
		ids := make([]string, 0, len(items))
		seen := map[string]bool{}
		secret := s.Foreach.Var != "" && slices.Contains(p.SecretVars, s.Foreach.Var)
		for i, item := range items {
			inst := s.Instance(item)
			if secret {
				inst = s.SecretInstance(item, i)
			}
			if seen[inst.ID] {
				return nil, &Error{File: p.Path, Line: s.Line, Step: s.ID,
					Msg: fmt.Sprintf("two items make the instance id %s; make them differ in letters, digits, _, . or -", inst.ID)}
			}
			seen[inst.ID] = true
			ids = append(ids, inst.ID)
			steps = append(steps, inst)
		}
		instances[s.ID] = ids
	}
	if !expanded {
		return p, nil
	}
	for i, s := range steps {
		if !slices.ContainsFunc(s.DependsOn, func(d string) bool { _, ok := instances[d]; return ok }) {
			continue
		}
		c := *s
		c.depIdx = nil
		c.DependsOn = nil
		for _, d := range s.DependsOn {
			if ids, ok := instances[d]; ok {
				c.DependsOn = append(c.DependsOn, ids...)
			} else {
				c.DependsOn = append(c.DependsOn, d)
			}
		}
		steps[i] = &c
	}
	out := *p
	out.Steps = steps
	return &out, nil
}

// Instance returns the instance of step s for item: a step of its own,
// named for it, its templates given {{item}} (or {{item.NAME}}).
func (s *Step) Instance(item map[string]string) *Step {
	inst := *s
	inst.depIdx = nil
	inst.Foreach = nil
	inst.InstanceOf = s.ID
	inst.Item = item
	var values []string
	if v, ok := item["item"]; ok {
		values = []string{v}
	} else if s.Foreach != nil {
		for _, a := range s.Foreach.Matrix {
			values = append(values, item["item."+a.Name])
		}
	}
	inst.ID = InstanceID(s.ID, values...)
	return &inst
}

// SecretInstance returns the instance of step s for item, the item at
// index i of its list, which holds a secret: named ID[i] and marked
// SecretItem.
func (s *Step) SecretInstance(item map[string]string, i int) *Step {
	inst := s.Instance(item)
	inst.ID = IndexID(s.ID, i)
	inst.SecretItem = true
	return inst
}

// items lists the items of a foreach known before the run: each as the
// template variables it sets.
func (f *Foreach) items(vars map[string]string) ([]map[string]string, error) {
	switch {
	case f.Matrix != nil:
		return f.combinations(), nil
	case f.Var != "":
		v, ok := vars[f.Var]
		if !ok {
			return nil, fmt.Errorf("foreach.var %q is not set", f.Var)
		}
		return ItemsOf(strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' })), nil
	}
	return ItemsOf(f.Items), nil
}

// ItemsOf makes foreach items of plain values.
func ItemsOf(values []string) []map[string]string {
	items := make([]map[string]string, len(values))
	for i, v := range values {
		items[i] = map[string]string{"item": v}
	}
	return items
}

// combinations lists every combination of the matrix's values, axis by
// axis in order, less the excluded ones.
func (f *Foreach) combinations() []map[string]string {
	combos := []map[string]string{{}}
	for _, a := range f.Matrix {
		var next []map[string]string
		for _, c := range combos {
			for _, v := range a.Values {
				m := make(map[string]string, len(c)+1)
				for k, x := range c {
					m[k] = x
				}
				m["item."+a.Name] = v
				next = append(next, m)
			}
		}
		combos = next
	}
	return slices.DeleteFunc(combos, func(c map[string]string) bool {
		for _, e := range f.Exclude {
			match := true
			for k, v := range e {
				match = match && c["item."+k] == v
			}
			if match && len(e) > 0 {
				return true
			}
		}
		return false
	})
}
