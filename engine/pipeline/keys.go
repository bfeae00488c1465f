package pipeline

import (
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"apollo/engine/template"
	"apollo/luart"
)

// A pipeline file's keys are two tables, each in the order suggestions
// prefer them: a key's decoder reads its value into the Pipeline or the
// Step, reporting problems with their line. The lists of known keys, of
// body keys and of cleanup keys all come from these tables, and a body key
// shares its decoder with the cleanup key written the same way.

// topField is one top-level key.
type topField struct {
	key    string
	decode func(l *loader, kv keyValue)
}

var topFields = []topField{
	{"task_name", (*loader).taskName},
	{"max_retries", func(l *loader, kv keyValue) {
		l.p.MaxRetries, _ = l.top().integer(kv.key, kv.v, 0, maxRetryCount)
		l.maxRetriesLine = kv.k.Line
	}},
	{"retry_delay_seconds", func(l *loader, kv keyValue) {
		if d, ok := l.top().seconds(kv.key, kv.v); ok {
			l.p.RetryDelay = d
		}
	}},
	{"max_retry_delay_seconds", func(l *loader, kv keyValue) {
		l.p.MaxRetryDelay, _ = l.top().seconds(kv.key, kv.v)
	}},
	{"parallelism", func(l *loader, kv keyValue) {
		l.p.Parallelism, _ = l.top().integer(kv.key, kv.v, 1, math.MaxInt32)
	}},
	{"durability", func(l *loader, kv keyValue) {
		if s, ok := l.top().choice(kv.key, kv.v, DurabilityAlways, DurabilityBatch); ok {
			l.p.Durability = s
		}
	}},
	{"vars", func(l *loader, kv keyValue) { l.vars(kv.v) }},
	{"resume_from", func(l *loader, kv keyValue) {
		if s, ok := l.top().nonEmpty(kv.key, kv.v); ok {
			l.p.ResumeFrom = s
			l.resumeLine = deref(kv.v).Line
		}
	}},
	{"max_dirty_restarts", func(l *loader, kv keyValue) {
		if n, ok := l.top().integer(kv.key, kv.v, 1, math.MaxInt32); ok {
			l.p.MaxDirtyRestarts = n
		}
	}},
	{"max_instances", func(l *loader, kv keyValue) {
		if n, ok := l.top().integer(kv.key, kv.v, 1, maxBound); ok {
			l.p.MaxInstances = n
		}
	}},
	{"max_steps", func(l *loader, kv keyValue) {
		if n, ok := l.top().integer(kv.key, kv.v, 1, maxBound); ok {
			l.p.MaxSteps = n
		}
	}},
	{"modules", func(l *loader, kv keyValue) { l.modules(kv.v) }},
	{"isolation", func(l *loader, kv keyValue) {
		l.p.Isolation, _ = l.top().choice(kv.key, kv.v, "", "process")
	}},
	{"resources", (*loader).resources},
	{"env_file", (*loader).envFile},
	{"secrets", (*loader).secrets},
	{"secret_vars", (*loader).secretVars},
	{"defaults", (*loader).defaults},
	{"env", func(l *loader, kv keyValue) { l.topEnv = l.settings(kv, []string{"env"}) }},
	{"working_dir", func(l *loader, kv keyValue) { l.topDir = l.settings(kv, []string{"working_dir"}) }},
	{"steps", func(l *loader, kv keyValue) { l.stepsNode, l.stepsLine = kv.v, kv.k.Line }},
	{HandlerOnFailure, func(l *loader, kv keyValue) { l.handlerNodes[0] = kv }},
	{HandlerFinally, func(l *loader, kv keyValue) { l.handlerNodes[1] = kv }},
	{"schedule", (*loader).schedule},      // schedule.go
	{"container", (*loader).containerTop}, // container.go
	{"notify", (*loader).topNotify},       // notify.go
	{"sla", (*loader).sla},                // notify.go
	{"triggers", (*loader).triggers},      // triggers.go
}

// Roles of step keys.
const (
	roleOther   = iota
	roleBody    // exactly one per step
	roleCleanup // at most one per step
)

// maxStepKeys bounds stepFields, so that a step's key lines fit in an
// array (TestStepFields checks it).
const maxStepKeys = 40

// stepField is one step key.
type stepField struct {
	key    string
	role   int
	decode func(si *stepInfo, kv keyValue)
}

var stepFields = []stepField{
	{"id", roleOther, nil}, // read first, by stepID
	{"command", roleBody, shellHook(func(s *Step) *string { return &s.Command })},
	{"lua", roleBody, luaHook(func(s *Step) (*string, *int) { return &s.Lua, &s.LuaLine })},
	{"script", roleBody, scriptHook(func(s *Step) *string { return &s.Script })},
	{"uses", roleBody, (*stepInfo).uses},
	{"run", roleBody, (*stepInfo).subPipeline}, // subpipe.go
	{"with", roleOther, (*stepInfo).with},
	{"depends_on", roleOther, func(si *stepInfo, kv keyValue) { si.deps, _ = si.at.list(kv.key, "step ids", kv.v) }},
	{"optional", roleOther, func(si *stepInfo, kv keyValue) { si.s.Optional, _ = si.at.boolean(kv.key, kv.v) }},
	{"timeout_seconds", roleOther, func(si *stepInfo, kv keyValue) { si.s.Timeout, _ = si.at.seconds(kv.key, kv.v) }},
	{"retry_policy", roleOther, func(si *stepInfo, kv keyValue) {
		if p, ok := si.at.choice(kv.key, kv.v, RetryNone, RetryFixed, RetryExponential); ok {
			si.s.RetryPolicy = p
		}
	}},
	{"max_retries", roleOther, func(si *stepInfo, kv keyValue) {
		if r, ok := si.at.integer(kv.key, kv.v, 0, maxRetryCount); ok {
			si.s.MaxRetries = r
		}
	}},
	{"durability", roleOther, func(si *stepInfo, kv keyValue) {
		if d, ok := si.at.choice(kv.key, kv.v, DurabilityAlways, DurabilityBatch); ok {
			si.s.Durability = d
		}
	}},
	{"cleanup_command", roleCleanup, shellHook(func(s *Step) *string { return &s.CleanupCommand })},
	{"cleanup_lua", roleCleanup, luaHook(func(s *Step) (*string, *int) { return &s.CleanupLua, &s.CleanupLuaLine })},
	{"cleanup_script", roleCleanup, scriptHook(func(s *Step) *string { return &s.CleanupScript })},
	{"env", roleOther, (*stepInfo).env},
	{"memory_mb", roleOther, func(si *stepInfo, kv keyValue) { si.s.MemoryMB, _ = si.at.integer(kv.key, kv.v, 1, maxMemoryMB) }},
	{"isolation", roleOther, func(si *stepInfo, kv keyValue) {
		si.s.Isolation, _ = si.at.choice(kv.key, kv.v, "", "inprocess", "process")
	}},
	{"when", roleOther, (*stepInfo).when},
	{"allow", roleOther, (*stepInfo).allow},
	{"uses_resource", roleOther, (*stepInfo).usesResource},
	{"foreach", roleOther, (*stepInfo).foreach},
	{"matrix", roleOther, (*stepInfo).matrix},
	{"exclude", roleOther, (*stepInfo).exclude},
	{"working_dir", roleOther, func(si *stepInfo, kv keyValue) {
		if d, ok := si.at.nonEmpty(kv.key, kv.v); ok {
			si.s.WorkingDir = filepath.Clean(d)
		}
	}},
	{"shell", roleOther, (*stepInfo).shell}, // shell.go
	{"cache", roleOther, (*stepInfo).cache}, // cache.go
	{"image", roleOther, (*stepInfo).image}, // container.go
	{"inputs", roleOther, (*stepInfo).inputs},
	{"outputs", roleOther, (*stepInfo).outputs},
	{"notify", roleOther, (*stepInfo).notify},
	{"pool", roleOther, func(si *stepInfo, kv keyValue) {
		if p, ok := si.at.nonEmpty(kv.key, kv.v); ok {
			if !validName(p, "") || len(p) > maxStepIDLen {
				si.at.errf(deref(kv.v).Line, "pool %q may only hold letters, digits, \"_\" and \"-\"", snippet(p))
				return
			}
			si.s.Pool = p
		}
	}},
}

// defaultKeys are the step keys that defaults: may set.
var defaultKeys = []string{"retry_policy", "max_retries", "timeout_seconds", "env", "memory_mb", "working_dir", "allow", "shell", "image"}

// Keys, from the tables.
var (
	topKeys     = fieldKeys(topFields, func(f topField) string { return f.key })
	stepKeys    = fieldKeys(stepFields, func(f stepField) string { return f.key })
	bodyKeys    = roleKeys(roleBody)
	cleanupKeys = roleKeys(roleCleanup)
	topIndex    = keyIndex(topKeys)
	stepIndex   = keyIndex(stepKeys)
)

// keyIndex maps each key to its position.
func keyIndex(keys []string) map[string]int {
	m := make(map[string]int, len(keys))
	for i, k := range keys {
		m[k] = i
	}
	return m
}

func fieldKeys[F any](fields []F, key func(F) string) []string {
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = key(f)
	}
	return keys
}

func roleKeys(role int) []string {
	var keys []string
	for _, f := range stepFields {
		if f.role == role {
			keys = append(keys, f.key)
		}
	}
	return keys
}

// Names people reach for from other tools.
var (
	topAliases = map[string]string{"name": "task_name", "task": "task_name", "tasks": "steps", "jobs": "steps",
		"parallel": "parallelism", "concurrency": "parallelism", "retries": "max_retries",
		"retry_delay": "retry_delay_seconds", "variables": "vars"}
	stepAliases = map[string]string{"name": "id", "cmd": "command", "interpreter": "shell",
		"needs": "depends_on", "depends": "depends_on", "deps": "depends_on", "after": "depends_on",
		"requires": "depends_on", "timeout": "timeout_seconds", "retries": "max_retries", "retry": "retry_policy",
		"environment": "env", "params": "with", "parameters": "with", "args": "with", "cleanup": "cleanup_command",
		"module": "uses", "memory": "memory_mb", "file": "script"}
)

// shellHook decodes a shell command (command, cleanup_command) into the
// field of the step that field names, checking its templates.
func shellHook(field func(*Step) *string) func(*stepInfo, keyValue) {
	return func(si *stepInfo, kv keyValue) {
		if c, ok := si.at.nonEmpty(kv.key, kv.v); ok {
			*field(si.s) = c
			si.at.template(kv.key, deref(kv.v), c, true)
		}
	}
}

// luaHook decodes inline Lua (lua, cleanup_lua), to be compiled by checkRefs,
// and the line of the file its first line is on.
func luaHook(field func(*Step) (*string, *int)) func(*stepInfo, keyValue) {
	return func(si *stepInfo, kv keyValue) {
		if si.commentedOut(kv) {
			return
		}
		body, line := field(si.s)
		*body, _ = si.at.nonEmpty(kv.key, kv.v)
		*line = bodyLine(deref(kv.v), *body)
		si.l.addRef(si, kv.key, kv.v, *body)
		for _, r := range luaOutputRefs(*body) {
			si.at.outputRef(kv.key, r.step, r.text, lineIn(deref(kv.v), *body, r.off))
		}
	}
}

// commentedOut reports, with an error, a Lua key whose whole value YAML
// read as a comment (`when: #ctx.outputs.list > 0`).
func (si *stepInfo) commentedOut(kv keyValue) bool {
	v := deref(kv.v)
	if v.Tag != "!!null" || v.Value != "" || kv.k.LineComment == "" {
		return false
	}
	si.at.errf(v.Line, "%s has no value: YAML read %q as a comment%s", kv.key, snippet(kv.k.LineComment), cutHint)
	return true
}

// bodyLine is the line of the file that holds the first line of body, the
// text of n, when its lines are the file's lines, one for one: a literal
// block (|) starts on the line after its key, a one-line scalar is on it.
// It is 0 otherwise (a folded block, a quoted string with "\n").
func bodyLine(n *yaml.Node, body string) int {
	switch {
	case n.Line <= 0 || body == "":
		return 0
	case n.Style&yaml.LiteralStyle != 0:
		return n.Line + 1
	case !strings.Contains(body, "\n"):
		return n.Line
	}
	return 0
}

// scriptHook decodes a Lua file (script, cleanup_script), to be checked by
// checkRefs.
func scriptHook(field func(*Step) *string) func(*stepInfo, keyValue) {
	return func(si *stepInfo, kv keyValue) {
		*field(si.s) = si.luaPath(kv.key, kv.v)
		si.l.addRef(si, kv.key, kv.v, *field(si.s))
	}
}

func (si *stepInfo) uses(kv keyValue) {
	name, ok := si.at.nonEmpty(kv.key, kv.v)
	if !ok {
		return
	}
	if !validModuleName(name) {
		si.at.errf(deref(kv.v).Line, "uses %q is not a module name; write a name like notify or pkg.mod", snippet(name))
		return
	}
	si.s.Uses = name
	si.l.addRef(si, kv.key, kv.v, name)
}

func (si *stepInfo) with(kv keyValue) {
	kvs, ok := si.at.mapping(kv.key, kv.v)
	if !ok {
		return
	}
	si.s.With = map[string]any{}
	for _, p := range kvs {
		if x, ok := si.at.value(joinPath("with", p.key), p.v); ok {
			si.s.With[p.key] = x
		}
	}
	if len(kvs) > 0 {
		si.withLines = make(map[string]int, len(kvs))
		for _, p := range kvs {
			si.withLines[p.key] = p.k.Line
		}
	}
}

func (si *stepInfo) env(kv keyValue) {
	kvs, _ := si.at.mapping(kv.key, kv.v)
	for _, p := range kvs {
		if !template.ValidName(p.key) {
			si.at.errf(p.k.Line, "env name %q must be letters, digits and _, not starting with a digit", snippet(p.key))
			continue
		}
		if val, ok := si.at.text("env."+p.key, p.v); ok {
			si.at.template("env."+p.key, deref(p.v), val, false)
			if si.s.Env == nil {
				si.s.Env = map[string]string{}
			}
			si.s.Env[p.key] = val
		}
	}
}

// top is where top-level problems are reported.
func (l *loader) top() where { return where{l: l} }

// taskName decodes task_name. The default task id is
// <task_name>-<task_date>, and a task id names files: a name that could
// only make a bad id is refused here, with its line.
func (l *loader) taskName(kv keyValue) {
	top := l.top()
	s, ok := top.nonEmpty(kv.key, kv.v)
	if !ok {
		return
	}
	line := deref(kv.v).Line
	switch {
	case !validName(s, "."):
		top.errf(line, "task_name %q may only hold letters, digits, \"_\", \".\" and \"-\"", snippet(s))
	case s[0] == '-':
		top.errf(line, "task_name %q must not start with \"-\": the task id made from it would read as an option", snippet(s))
	case len(s) > maxTaskNameLen:
		top.errf(line, "task_name is %d bytes; the limit is %d (the task id adds -YYYY-MM-DD)", len(s), maxTaskNameLen)
	default:
		l.p.TaskName = s
	}
}

// pipeline reads the top-level mapping into l.p and l.steps.
func (l *loader) pipeline(root *yaml.Node) {
	top := l.top()
	if root.Kind != yaml.MappingNode {
		top.errf(root.Line, "the top level must be a mapping with task_name and steps, not %s", describe(root))
		return
	}
	hasName := false
	for _, kv := range top.pairs(root) {
		i, known := topIndex[kv.key]
		switch {
		case known:
			hasName = hasName || kv.key == "task_name"
			topFields[i].decode(l, kv)
		case slices.Contains(stepKeys, kv.key):
			top.errf(kv.k.Line, "unknown key %q at the top level; it belongs inside a step, under steps:", kv.key)
		default:
			top.unknownKey(kv.k, topKeys, topAliases)
		}
	}
	if !hasName {
		top.errf(0, "task_name is missing; add task_name: <name> at the top level")
	}
	l.applyDefaults()
	l.readSteps()
	l.checkTopRetries()
	l.checkResources()
	l.checkForeachVars()
	l.checkSecretVars()
	l.checkNotifySecrets()
	l.checkTriggers()
}

// readSteps reads the steps list that pipeline found.
func (l *loader) readSteps() {
	top := l.top()
	if l.stepsNode == nil {
		top.errf(0, "steps is missing; add steps: with at least one step")
		return
	}
	items, ok := top.list("steps", stepsExample, l.stepsNode)
	if !ok {
		return
	}
	if len(items) == 0 {
		top.errf(l.stepsLine, "steps is empty; add at least one step")
		return
	}
	l.setKnown()
	var handlers [2][]*yaml.Node
	for i, kv := range l.handlerNodes {
		if kv.v != nil {
			handlers[i], _ = top.list(kv.key, stepsExample, kv.v)
		}
	}
	l.slabSize = len(items) + len(handlers[0]) + len(handlers[1])
	l.steps = make([]*stepInfo, 0, l.slabSize)
	l.p.Steps = make([]*Step, 0, l.slabSize)
	l.readStepList(l.stepsNode, items, "")
	for i, kv := range l.handlerNodes {
		l.readStepList(kv.v, handlers[i], kv.key)
	}
}

// readStepList reads a list of steps: steps:, or a handler list
// (on_failure:, finally:) when handler is its key.
func (l *loader) readStepList(list *yaml.Node, items []*yaml.Node, handler string) {
	if len(items) == 0 {
		return
	}
	raw := deref(list).Content
	for i, item := range items {
		n := len(l.steps)
		l.step(i+1, item)
		if len(l.steps) > n {
			l.steps[n].s.Handler = handler
			if handler != "" {
				// A handler's failure is reported; it does not make a task
				// fail that had not.
				l.steps[n].s.Optional = true
			}
			l.checkCache(l.steps[n])
		}
		// A step repeated through an alias (- *s) is placed at the alias,
		// so that "id is already used on line N" names two different lines.
		if raw[i].Kind == yaml.AliasNode && len(l.steps) > n && l.steps[n].s.Line > 0 {
			l.steps[n].line, l.steps[n].s.Line = raw[i].Line, raw[i].Line
		}
	}
}

// checkHandlerDeps checks that steps depend only on steps of their own
// list: a handler runs once every step of steps: has settled, so it needs
// none of them, and no step of steps: can wait for a handler.
func (l *loader) checkHandlerDeps() {
	handlerOf := make(map[string]string, len(l.steps))
	for _, si := range l.steps {
		handlerOf[si.s.ID] = si.s.Handler
	}
	for _, si := range l.steps {
		for i, dep := range si.s.DependsOn {
			if h := handlerOf[dep]; h != si.s.Handler {
				line := si.line
				if i < len(si.deps) {
					line = si.deps[i].Line
				}
				list := func(h string) string {
					if h == "" {
						return "steps"
					}
					return h
				}
				si.at.errf(line, "depends on %q, a step of %s; a step of %s depends only on steps of its own list "+
					"(handlers run once every step has settled)", dep, list(h), list(si.s.Handler))
			}
		}
	}
}

// step reads one item of steps.
func (l *loader) step(index int, n *yaml.Node) {
	at := where{l: l, index: index}
	if n.Kind != yaml.MappingNode {
		at.errf(n.Line, "must be a mapping with id and a body such as command, not %s", describe(n))
		return
	}
	si, s := l.newStep()
	d := &l.p.Defaults
	*s = Step{RetryPolicy: RetryNone, MaxRetries: l.p.MaxRetries, Durability: l.p.Durability,
		Timeout: d.Timeout, MemoryMB: d.MemoryMB, WorkingDir: d.WorkingDir,
		Allow: slices.Clone(d.Allow), HTTPHosts: slices.Clone(d.HTTPHosts), Shell: d.Shell,
		Container: d.Container}
	if d.RetryPolicy != "" {
		s.RetryPolicy = d.RetryPolicy
	}
	if _, ok := l.defaultsSet("max_retries"); ok {
		s.MaxRetries = d.MaxRetries
	}
	if len(d.Env) > 0 || len(d.EnvFile) > 0 {
		s.Env = maps.Clone(d.EnvFile) // env_file:, then env:, then the step's env:
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		maps.Copy(s.Env, d.Env)
	}
	si.l, si.s, si.line = l, s, n.Line
	kvs := si.stepID(n, index)
	for _, kv := range kvs {
		if kv.key == "id" {
			continue
		}
		si.setLine(kv.key, kv.k.Line)
		i, known := stepIndex[kv.key]
		switch {
		case known:
			stepFields[i].decode(si, kv)
		case slices.Contains(topKeys, kv.key):
			si.at.errf(kv.k.Line, "%s is a pipeline setting, not a step key; move it to the top level", kv.key)
		default:
			si.at.unknownKey(kv.k, stepKeys, stepAliases)
		}
	}
	l.checkStepShape(si)
	l.steps = append(l.steps, si)
	l.p.Steps = append(l.p.Steps, s)
}

// stepID reads a step's id before its other keys, so that every other
// problem can name the step, and returns the step's pairs.
func (si *stepInfo) stepID(n *yaml.Node, index int) []keyValue {
	l := si.l
	at := where{l: l, index: index}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind == yaml.ScalarNode && k.Value == "id" && v.Kind == yaml.ScalarNode && v.Tag != "!!null" && strings.TrimSpace(v.Value) != "" {
			at = where{l: l, step: stepLabel(v.Value)}
			break
		}
	}
	kvs := at.pairs(n)
	for _, kv := range kvs {
		if kv.key != "id" {
			continue
		}
		si.line = kv.k.Line
		si.setLine("id", kv.k.Line)
		id, ok := at.nonEmpty("id", kv.v)
		if !ok {
			break
		}
		at = where{l: l, step: stepLabel(id)}
		si.s.ID, si.s.Line = id, kv.k.Line
		switch {
		case !validName(id, ""):
			at.errf(kv.k.Line, "id may only hold letters, digits, \"_\" and \"-\"")
		case len(id) > maxStepIDLen:
			at.errf(kv.k.Line, "id is %d bytes; the limit is %d", len(id), maxStepIDLen)
		}
	}
	at.si = si
	si.at = at
	return kvs
}

// luaPath decodes script and cleanup_script: a .lua file inside the
// pipeline's folder.
func (si *stepInfo) luaPath(key string, v *yaml.Node) string {
	s, ok := si.at.nonEmpty(key, v)
	if !ok {
		return ""
	}
	line := deref(v).Line
	if msg := localPath(s, pipelineFolder); msg != "" {
		si.at.errf(line, "%s %q %s", key, snippet(s), msg)
		return ""
	}
	if !strings.HasSuffix(s, ".lua") {
		si.at.errf(line, "%s %q must name a .lua file", key, snippet(s))
		return ""
	}
	return filepath.Clean(s)
}

// when decodes a step's condition: a Lua expression, checked to compile
// here, whose upstream references are checked once the graph is known.
func (si *stepInfo) when(kv keyValue) {
	if si.commentedOut(kv) {
		return
	}
	expr, ok := si.at.nonEmpty(kv.key, kv.v)
	if !ok {
		return
	}
	n := deref(kv.v)
	if line, msg := luart.CheckSyntax(WhenChunk(expr)); msg != "" {
		if line > 0 && n.Style&yaml.LiteralStyle != 0 {
			line += n.Line
		} else {
			line = n.Line
		}
		if n.Style == 0 && n.LineComment != "" {
			msg += fmt.Sprintf("; a YAML comment cut the expression before %q%s", snippet(n.LineComment), cutHint)
		}
		si.at.errf(line, "when does not compile as a Lua expression: %s", msg)
		return
	}
	si.s.When, si.s.WhenLine = expr, bodyLine(n, expr)
	for _, r := range luaOutputRefs(expr) {
		si.at.outputRef(kv.key, r.step, r.text, lineIn(n, expr, r.off))
	}
}

// WhenChunk is the Lua chunk a when: expression is run as.
func WhenChunk(expr string) string { return "return (" + expr + "\n)" }

// resources decodes the named resources and how many steps may hold each
// at once.
func (l *loader) resources(kv keyValue) {
	top := l.top()
	kvs, _ := top.mapping(kv.key, kv.v)
	l.p.Resources = make(map[string]int, len(kvs))
	for _, p := range kvs {
		if !validName(p.key, ".") {
			top.errf(p.k.Line, "resource name %q may only hold letters, digits, \"_\", \".\" and \"-\"", snippet(p.key))
			continue
		}
		if n, ok := top.integer("resources."+p.key, p.v, 1, math.MaxInt32); ok {
			l.p.Resources[p.key] = n
		}
	}
}

// usesResource decodes the resources a step holds while it runs: one name
// or a list. Whether they are declared is checked once the top level is
// read (checkResources).
func (si *stepInfo) usesResource(kv keyValue) {
	v := deref(kv.v)
	items := []*yaml.Node{v}
	if v.Kind == yaml.SequenceNode {
		items, _ = si.at.list(kv.key, "resource names", v)
	}
	for _, item := range items {
		name, ok := si.at.nonEmpty(kv.key, item)
		if !ok {
			continue
		}
		if slices.Contains(si.s.Resources, name) {
			si.at.errf(item.Line, "uses_resource names %q twice; remove one", name)
			continue
		}
		si.s.Resources = append(si.s.Resources, name)
		si.l.resourceRefs = append(si.l.resourceRefs, resourceRef{si: si, name: name, line: item.Line})
	}
}

// resourceRef is a step's use of a named resource.
type resourceRef struct {
	si   *stepInfo
	name string
	line int
}

// checkResources reports a resource a step uses that the pipeline does not
// declare.
func (l *loader) checkResources() {
	names := slices.Sorted(maps.Keys(l.p.Resources))
	for _, r := range l.resourceRefs {
		if _, ok := l.p.Resources[r.name]; !ok {
			hint := l.hint(r.name, names)
			if hint == "" {
				hint = fmt.Sprintf("; declare it at the top level: resources: {%s: N}", r.name)
			}
			r.si.at.errf(r.line, "uses_resource %q is not a declared resource%s", r.name, hint)
		}
	}
}

// stepsExample is what a list of steps holds, as an error shows it.
const stepsExample = `steps (each item a mapping that begins "- id: NAME")`
