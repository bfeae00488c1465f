package pipeline

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"apollo/engine/template"
)

// Trigger kinds: what, besides the clock, makes apollo serve start a run
// (triggers:, docs/spec.md §9.6).
const (
	TriggerAfter   = "after"   // a run of another pipeline ended
	TriggerFile    = "file"    // a file matching a glob appeared or changed
	TriggerWebhook = "webhook" // a signed POST /hooks/NAME
)

// After statuses: which ends of the upstream run start this one.
const (
	AfterSuccess = "success"
	AfterFailure = "failure"
	AfterAny     = "any"
)

// DefaultSettle is how long a file's size and modification time must stay
// the same before a file trigger takes it as written.
const DefaultSettle = 2 * time.Second

// Trigger is one entry of a pipeline's triggers: list. Exactly one of
// After, File and Webhook is set, as Kind says.
type Trigger struct {
	Kind string
	Line int

	// After is the upstream pipeline file as written (relative to this
	// pipeline's folder, or absolute); AfterPath is it, absolute and clean.
	// Status is success, failure or any.
	After, AfterPath, Status string

	// File is the glob as written; Glob is it absolute (relative ones are
	// read from this pipeline's folder). Only its last element may hold
	// wildcards. Settle is how long a file must stay unchanged.
	File, Glob string
	Settle     time.Duration

	// Webhook is the hook's name (POST /hooks/NAME); Secret names the
	// entry of secrets: that signs its deliveries; Vars maps a var of the
	// pipeline to the JSON path of the payload field it takes.
	Webhook string
	Secret  string
	Vars    map[string]JSONPath
	// SecretFrom is where the secret's value is read; EnvFile the
	// pipeline's env_file: variables and Dir its folder, which an env or a
	// file source falls back on or is read from.
	SecretFrom Secret
	EnvFile    map[string]string
	Dir        string
}

// TriggerVarNames are the {{trigger.NAME}} placeholders a triggered run
// gets, besides trigger.outputs.STEP[.KEY] for an after: trigger. A run
// that no trigger started has them empty.
var TriggerVarNames = []string{"kind", "pipeline", "task_id", "status", "path", "webhook", "delivery"}

// triggerKeys are the keys of a triggers: entry, in the order suggestions
// prefer them.
var triggerKeys = []string{"after", "status", "file", "settle_seconds", "webhook", "secret", "vars"}

// triggers decodes the top-level triggers: list.
func (l *loader) triggers(kv keyValue) {
	top := l.top()
	items, _ := top.list(kv.key, "triggers", kv.v)
	for i, item := range items {
		if t, ok := l.trigger(i+1, deref(item)); ok {
			l.p.Triggers = append(l.p.Triggers, t)
		}
	}
}

// trigger decodes one entry of triggers:.
func (l *loader) trigger(n int, item *yaml.Node) (Trigger, bool) {
	top := l.top()
	t := Trigger{Line: item.Line, Status: AfterSuccess, Settle: DefaultSettle}
	at := "triggers[" + strconv.Itoa(n) + "]"
	if item.Kind != yaml.MappingNode {
		top.errf(item.Line, "%s must be a mapping with after:, file: or webhook:, not %s", at, describe(item))
		return t, false
	}
	ok := true
	var kinds []string
	var keysSeen []*yaml.Node
	for _, p := range top.pairs(item) {
		key := at + "." + p.key
		good := true
		switch p.key {
		case "after":
			kinds = append(kinds, p.key)
			t.After, good = top.nonEmpty(key, p.v)
		case "file":
			kinds = append(kinds, p.key)
			t.File, good = top.nonEmpty(key, p.v)
		case "webhook":
			kinds = append(kinds, p.key)
			t.Webhook, good = top.nonEmpty(key, p.v)
		case "status":
			t.Status, good = top.choice(key, p.v, AfterSuccess, AfterFailure, AfterAny)
		case "settle_seconds":
			t.Settle, good = top.seconds(key, p.v)
		case "secret":
			t.Secret, good = top.nonEmpty(key, p.v)
		case "vars":
			good = l.triggerVars(&t, key, p.v)
		default:
			top.unknownKey(p.k, triggerKeys, map[string]string{"settle": "settle_seconds", "path": "file", "glob": "file",
				"pipeline": "after", "hook": "webhook", "on": "status", "when": "status"})
			good = false
		}
		ok = ok && good
		keysSeen = append(keysSeen, p.k)
	}
	if !ok {
		return t, false
	}
	switch len(kinds) {
	case 0:
		top.errf(item.Line, "%s has no after:, file: or webhook:; give one of them", at)
		return t, false
	case 1:
		t.Kind = kinds[0]
	default:
		top.errf(item.Line, "%s has %s; a trigger is one of after:, file: or webhook: (write one entry for each)", at, strings.Join(kinds, " and "))
		return t, false
	}
	// The keys that belong to another kind of trigger.
	belongs := map[string]string{"status": TriggerAfter, "settle_seconds": TriggerFile, "secret": TriggerWebhook, "vars": TriggerWebhook}
	for _, k := range keysSeen {
		if kind, has := belongs[k.Value]; has && kind != t.Kind {
			top.errf(k.Line, "%s.%s is a setting of %s: triggers, not of %s: ones", at, k.Value, kind, t.Kind)
			ok = false
		}
	}
	if !ok {
		return t, false
	}
	switch t.Kind {
	case TriggerAfter:
		return t, l.checkAfter(&t, at)
	case TriggerFile:
		return t, l.checkFileGlob(&t, at)
	}
	if !validName(t.Webhook, "") || len(t.Webhook) > 100 {
		top.errf(item.Line, "%s.webhook %q may only hold letters, digits, \"_\" and \"-\" (it is the last part of /hooks/NAME)", at, snippet(t.Webhook))
		return t, false
	}
	return t, true
}

// triggerVars decodes a webhook's vars: each var of the pipeline, the JSON
// path of the payload field it takes.
func (l *loader) triggerVars(t *Trigger, key string, v *yaml.Node) bool {
	top := l.top()
	kvs, ok := top.mapping(key, v)
	if !ok {
		return false
	}
	t.Vars = map[string]JSONPath{}
	for _, p := range kvs {
		expr, ok := top.nonEmpty(key+"."+p.key, p.v)
		if !ok {
			return false
		}
		path, err := ParseJSONPath(expr)
		if err != nil {
			top.errf(deref(p.v).Line, "%s.%s: %v", key, p.key, err)
			return false
		}
		path.Line = p.k.Line
		t.Vars[p.key] = path
	}
	return true
}

// checkAfter resolves an after: trigger's pipeline file and checks that it
// exists and is not this one.
func (l *loader) checkAfter(t *Trigger, at string) bool {
	top := l.top()
	path := t.After
	if !filepath.IsAbs(path) {
		path = filepath.Join(l.p.Dir, path)
	}
	t.AfterPath = filepath.Clean(path)
	if !strings.HasSuffix(t.After, ".yaml") && !strings.HasSuffix(t.After, ".yml") {
		top.errf(t.Line, "%s.after %q must name a pipeline file (.yaml or .yml)", at, snippet(t.After))
		return false
	}
	fi, err := os.Stat(t.AfterPath)
	if err != nil || !fi.Mode().IsRegular() {
		top.errf(t.Line, "%s.after names %q, which is no pipeline file (looked for %s); after: is read from this pipeline's folder",
			at, snippet(t.After), t.AfterPath)
		return false
	}
	if self, err := filepath.Abs(l.p.Path); err == nil && filepath.Clean(self) == t.AfterPath {
		top.errf(t.Line, "%s.after names this pipeline itself; a run that starts itself would never stop", at)
		return false
	}
	return true
}

// checkFileGlob resolves a file: trigger's glob: only its last element may
// hold wildcards, so that one folder is watched.
func (l *loader) checkFileGlob(t *Trigger, at string) bool {
	top := l.top()
	glob := t.File
	if !filepath.IsAbs(glob) {
		glob = filepath.Join(l.p.Dir, glob)
	}
	glob = filepath.Clean(glob)
	dir, base := filepath.Split(glob)
	if strings.ContainsAny(dir, "*?[") {
		top.errf(t.Line, "%s.file %q has a wildcard in a folder; only the file name may hold * ? [ (one folder is watched)", at, snippet(t.File))
		return false
	}
	if _, err := filepath.Match(base, ""); err != nil {
		top.errf(t.Line, "%s.file %q is not a glob: %v", at, snippet(t.File), err)
		return false
	}
	if strings.HasSuffix(t.File, "/") || base == "" {
		top.errf(t.Line, "%s.file %q names a folder; add the files' pattern, as in incoming/*.csv", at, snippet(t.File))
		return false
	}
	t.Glob = glob
	return true
}

// checkTriggers checks what triggers: needs of the rest of the file: a
// webhook's secret is declared under secrets:, its vars under vars:, and
// a hook name or upstream pipeline is named once.
func (l *loader) checkTriggers() {
	top := l.top()
	hooks := map[string]int{}
	afters := map[string]int{}
	var secretNames []string
	for _, s := range l.p.Secrets {
		secretNames = append(secretNames, s.Name)
	}
	for i := range l.p.Triggers {
		t := &l.p.Triggers[i]
		switch t.Kind {
		case TriggerAfter:
			if first, dup := afters[t.AfterPath]; dup {
				top.errf(t.Line, "triggers names %q in after: again (first on line %d); write one entry, with status: any if both ends should start a run", t.After, first)
			}
			afters[t.AfterPath] = t.Line
		case TriggerWebhook:
			if first, dup := hooks[t.Webhook]; dup {
				top.errf(t.Line, "triggers declares webhook %q again (first on line %d)", t.Webhook, first)
			}
			hooks[t.Webhook] = t.Line
			switch {
			case t.Secret == "":
				top.errf(t.Line, "webhook %q has no secret: name the entry of secrets: whose value signs its deliveries (X-Hub-Signature-256)", t.Webhook)
			case slices.Contains(secretNames, t.Secret):
				t.SecretFrom = l.p.Secrets[slices.Index(secretNames, t.Secret)]
				t.EnvFile, t.Dir = l.p.Defaults.EnvFile, l.p.Dir
			default:
				hint := DidYouMean(t.Secret, secretNames)
				if hint == "" {
					hint = fmt.Sprintf("; declare it: secrets: [%s]", t.Secret)
				}
				top.errf(t.Line, "webhook %q: secret %q is not declared under secrets:%s", t.Webhook, t.Secret, hint)
			}
			for _, name := range slices.Sorted(maps.Keys(t.Vars)) {
				if _, ok := l.p.Vars[name]; !ok {
					top.errf(t.Vars[name].Line, "webhook %q: vars.%s is not declared under vars:; declare it there with its default", t.Webhook, name)
				}
			}
		}
	}
}

// triggerRef checks a {{trigger.…}} placeholder of a template and notes
// it, so that a run no trigger started renders it empty.
func (w where) triggerRef(key, name string, line int) {
	l := w.l
	if len(l.p.Triggers) == 0 {
		w.errf(line, "%s: {{%s}} is what started the run, known only in a pipeline with triggers:", key, name)
		return
	}
	rest := strings.TrimPrefix(name, "trigger.")
	if _, _, isOut := template.OutputRef(rest); !isOut && !slices.Contains(TriggerVarNames, rest) {
		w.errf(line, "%s: unknown placeholder {{%s}}%s; a trigger gives {{trigger.%s}} and {{trigger.outputs.STEP.KEY}}",
			key, name, DidYouMean(rest, TriggerVarNames), strings.Join(TriggerVarNames, "}}, {{trigger."))
		return
	}
	if !slices.Contains(l.p.TriggerVars, name) {
		l.p.TriggerVars = append(l.p.TriggerVars, name)
	}
}

// JSONPath is a small JSON path: $ then .name, ["name"] and [N] steps.
type JSONPath struct {
	Expr  string
	Steps []any // string keys, int indexes
	Line  int
}

// ParseJSONPath reads a path such as $.ref, $.head_commit.id or
// $.commits[0]["message"].
func ParseJSONPath(expr string) (JSONPath, error) {
	p := JSONPath{Expr: expr}
	s, ok := strings.CutPrefix(strings.TrimSpace(expr), "$")
	if !ok {
		return p, fmt.Errorf("JSON path %q must start with $, as in $.ref", snippet(expr))
	}
	for s != "" {
		switch {
		case s[0] == '.':
			end := strings.IndexAny(s[1:], ".[")
			if end < 0 {
				end = len(s) - 1
			}
			name := s[1 : 1+end]
			if name == "" {
				return p, fmt.Errorf("JSON path %q has an empty name after a dot", snippet(expr))
			}
			p.Steps = append(p.Steps, name)
			s = s[1+end:]
		case s[0] == '[':
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return p, fmt.Errorf("JSON path %q has a [ without ]", snippet(expr))
			}
			in := s[1:end]
			if n, err := strconv.Atoi(in); err == nil && n >= 0 {
				p.Steps = append(p.Steps, n)
			} else if q, err := strconv.Unquote(in); err == nil && len(in) >= 2 && in[0] == '"' {
				p.Steps = append(p.Steps, q)
			} else {
				return p, fmt.Errorf("JSON path %q: [%s] must be an index (0, 1, ...) or a quoted name", snippet(expr), snippet(in))
			}
			s = s[end+1:]
		default:
			return p, fmt.Errorf("JSON path %q: expected . or [ at %q", snippet(expr), snippet(s))
		}
	}
	return p, nil
}

// Lookup returns the value at the path in v (as encoding/json decodes
// into an any), and whether it is there.
func (p JSONPath) Lookup(v any) (any, bool) {
	for _, st := range p.Steps {
		switch st := st.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[st]; !ok {
				return nil, false
			}
		case int:
			a, ok := v.([]any)
			if !ok || st >= len(a) {
				return nil, false
			}
			v = a[st]
		}
	}
	return v, true
}

// Describe says in one line what starts a run, for validate and the dry
// run.
func (t Trigger) Describe() string {
	switch t.Kind {
	case TriggerAfter:
		return fmt.Sprintf("after %s ends (status %s): apollo serve starts a run with {{trigger.task_id}} and {{trigger.outputs.*}} of it", t.After, t.Status)
	case TriggerFile:
		return fmt.Sprintf("file %s: apollo serve starts a run for each new or changed file once it has not changed for %s, {{trigger.path}} naming it", t.Glob, t.Settle)
	}
	vars := ""
	for _, name := range slices.Sorted(maps.Keys(t.Vars)) {
		vars += fmt.Sprintf("; %s from %s", name, t.Vars[name].Expr)
	}
	return fmt.Sprintf("webhook %s: POST /hooks/%s on apollo serve, signed with secret %s (X-Hub-Signature-256)%s", t.Webhook, t.Webhook, t.Secret, vars)
}

// triggerVarKnown reports whether a trigger.… name is one a trigger sets.
func triggerVarKnown(name string) bool {
	rest := strings.TrimPrefix(name, "trigger.")
	_, _, isOut := template.OutputRef(rest)
	return isOut || slices.Contains(TriggerVarNames, rest)
}
