package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/engine/template"
	"apollo/luart"
)

// renderedStep is a step with its templates filled in for one task.
type renderedStep struct {
	step           *pipeline.Step
	command        string
	cleanupCommand string
	env            map[string]string
	with           map[string]any
	defDigest      string
	// sources are the Lua files the step loads, read once for the run
	// (pinLuaFiles), and filesDigest their digest, part of the definition
	// and input digests; none for a step that loads no file.
	sources     luart.Sources
	filesDigest string
	// cache is the step's cache:, rendered; nil for a step without one.
	cache *renderedCache
	// lateVars is set for a step whose command, cleanup or env names an
	// upstream output: those are rendered again, with the outputs, when
	// the step runs (late); until then they hold stand-ins, <outputs.ID.KEY>.
	lateVars map[string]string
}

// body is what the step runs, as text, for digests and the plan.
func (rs *renderedStep) body() string {
	s := rs.step
	switch {
	case s.Command != "":
		return rs.command
	case s.Lua != "":
		return s.Lua
	case s.Script != "":
		return "script:" + s.Script
	case s.Run != "":
		return "run:" + s.Run
	default:
		return "uses:" + s.Uses
	}
}

// taskVars builds the template variables of a task: the pipeline's vars,
// then --var overrides, then the built-ins (which --var cannot change,
// except task_date).
func taskVars(p *pipeline.Pipeline, overrides map[string]string, taskID, stateDir string, now time.Time) (map[string]string, error) {
	vars := map[string]string{}
	for k, v := range p.Vars {
		vars[k] = v
	}
	for k, v := range overrides {
		vars[k] = v
	}
	date, ok := vars["task_date"]
	if !ok {
		date = now.Format("2006-01-02")
	} else if !pipeline.IsDate(date) {
		return nil, fmt.Errorf("task_date %q is not a date: use YYYY-MM-DD", date)
	}
	vars["task_date"] = date
	if taskID == "" {
		taskID = p.TaskName + "-" + date
	}
	if err := statedir.ValidTaskID(taskID); err != nil {
		return nil, err
	}
	vars["task_id"] = taskID
	vars["task_name"] = p.TaskName
	for _, name := range p.TriggerVars { // empty in a run no trigger started
		if _, ok := vars[name]; !ok {
			vars[name] = ""
		}
	}
	vars["state_dir"] = stateDir
	vars["artifacts_dir"] = filepath.Join(stateDir, "artifacts", taskID)
	return vars, nil
}

// renderSteps fills in every step's templates. Problems are reported per
// step, all at once.
func renderSteps(p *pipeline.Pipeline, vars map[string]string) ([]*renderedStep, error) {
	out := make([]*renderedStep, len(p.Steps))
	var errs []error
	// One map for every step, its step_id set per step: rendering keeps
	// no reference to it.
	sv := make(map[string]string, len(vars)+1)
	for k, v := range vars {
		sv[k] = v
	}
	noEnv := map[string]string{} // shared, never written
	slab := make([]renderedStep, len(p.Steps))
	for i, s := range p.Steps {
		sv["step_id"] = s.ID
		rs := &slab[i]
		rs.step, rs.env = s, noEnv
		out[i] = rs
		if s.Foreach != nil {
			// The template of instances known only when it runs (foreach:
			// {output: ...}): its instances are rendered then, each with
			// its item; the template runs no body of its own.
			rs.command = s.Command
			rs.defDigest = definitionDigest(rs)
			continue
		}
		for k, v := range s.Item {
			sv[k] = v
		}
		refs := outputPlaceholders(s)
		if len(refs) > 0 {
			rs.lateVars = maps.Clone(sv)
			for _, name := range refs {
				sv[name] = "<" + name + ">"
			}
		}
		rs.render(sv, func(what string, err error) {
			errs = append(errs, &pipeline.Error{File: p.Path, Line: s.Line, Step: s.ID, Msg: fmt.Sprintf("%s: %v", what, err)})
		})
		rs.defDigest = definitionDigest(rs)
		for _, name := range refs {
			delete(sv, name)
		}
		for k := range s.Item {
			delete(sv, k)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// render fills in the step's command, cleanup command, env, with and cache
// settings from vars, calling bad with each template's problem.
func (rs *renderedStep) render(vars map[string]string, bad func(what string, err error)) {
	s := rs.step
	var err error
	if s.Command != "" {
		if rs.command, err = template.RenderShell(s.Command, vars); err != nil {
			bad("command", err)
		}
	}
	if s.CleanupCommand != "" {
		if rs.cleanupCommand, err = template.RenderShell(s.CleanupCommand, vars); err != nil {
			bad("cleanup_command", err)
		}
	}
	if len(s.Env) > 0 {
		rs.env = make(map[string]string, len(s.Env))
		for _, k := range slices.Sorted(maps.Keys(s.Env)) {
			if rs.env[k], err = template.RenderPlain(s.Env[k], vars); err != nil {
				bad("env "+k, err)
			}
		}
	}
	if s.With != nil {
		if w, err := renderValue(s.With, vars); err != nil {
			bad("with", err)
		} else {
			rs.with = w.(map[string]any)
		}
	}
	if s.Cache != nil {
		renderCache(rs, vars, bad)
	}
}

// renderedCache is a step's cache.key, inputs: and outputs: (with
// cache.paths), rendered.
type renderedCache struct {
	key             string
	inputs, outputs []string
}

// renderCache renders a cached step's cache.key, inputs and outputs.
func renderCache(rs *renderedStep, vars map[string]string, bad func(what string, err error)) {
	s := rs.step
	rc := &renderedCache{}
	rs.cache = rc
	var err error
	if s.Cache.Key != "" {
		if rc.key, err = template.RenderPlain(s.Cache.Key, vars); err != nil {
			bad("cache.key", err)
		}
	}
	paths := func(what string, in []string) []string {
		out := make([]string, 0, len(in))
		for _, p := range in {
			r, err := template.RenderPlain(p, vars)
			if err != nil {
				bad(what, err)
				continue
			}
			if !filepath.IsLocal(r) {
				bad(what, fmt.Errorf("%q leaves the step's folder once rendered; keep it inside", r))
				continue
			}
			out = append(out, filepath.Clean(r))
		}
		return out
	}
	rc.inputs = paths("inputs", s.Inputs)
	rc.outputs = paths("outputs", s.Outputs)
}

// renderValue renders the strings inside a decoded YAML value.
func renderValue(v any, vars map[string]string) (any, error) {
	switch x := v.(type) {
	case string:
		return template.RenderPlain(x, vars)
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			r, err := renderValue(e, vars)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			m[k] = r
		}
		return m, nil
	case []any:
		l := make([]any, len(x))
		for i, e := range x {
			r, err := renderValue(e, vars)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			l[i] = r
		}
		return l, nil
	default:
		return v, nil
	}
}

// outputPlaceholders lists the {{outputs...}} placeholders in a shell step's
// command, cleanup and env.
func outputPlaceholders(s *pipeline.Step) []string {
	if s.Command == "" {
		return nil
	}
	var names []string
	add := func(tmpl string) {
		segs, _ := template.Parse(tmpl) // a bad template was reported by Load
		for _, sg := range segs {
			if _, _, ok := template.OutputRef(sg.Name); ok && !slices.Contains(names, sg.Name) {
				names = append(names, sg.Name)
			}
		}
	}
	add(s.Command)
	add(s.CleanupCommand)
	for _, v := range s.Env {
		add(v)
	}
	return names
}

// late returns n's rendered step for the attempt about to run: n.rs, or,
// for a step that names upstream outputs, n.rs rendered again with their
// values. Its dependencies have ended, so their outputs are known.
func (r *taskRun) late(n *node) (*renderedStep, error) {
	return renderLate(n.rs, func(id string) json.RawMessage { return r.node(id).output })
}

// renderLate renders rs again with the upstream outputs outputOf gives, if
// it names any.
func renderLate(rs *renderedStep, outputOf func(id string) json.RawMessage) (*renderedStep, error) {
	if rs.lateVars == nil {
		return rs, nil
	}
	s := rs.step
	vars := maps.Clone(rs.lateVars)
	for _, name := range outputPlaceholders(s) {
		step, key, _ := template.OutputRef(name)
		v, err := outputText(outputOf(step), step, key)
		if err != nil {
			return rs, fmt.Errorf("{{%s}}: %w", name, err)
		}
		vars[name] = v
	}
	out := *rs
	var first error
	out.render(vars, func(what string, err error) {
		if first == nil {
			first = fmt.Errorf("%s: %w", what, err)
		}
	})
	if first != nil {
		return rs, first
	}
	return &out, nil
}

// outputText is the text an {{outputs.STEP[.KEY]}} placeholder stands
// for: a string as it is, any other JSON value as JSON.
func outputText(raw json.RawMessage, step, key string) (string, error) {
	if len(raw) == 0 {
		return "", fmt.Errorf("step %q published no output", step)
	}
	if key != "" {
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return "", fmt.Errorf("the output of step %q is not an object with keys", step)
		}
		v, ok := m[key]
		if !ok {
			return "", fmt.Errorf("the output of step %q has no key %q (it has %s)", step, key,
				strings.Join(slices.Sorted(maps.Keys(m)), ", "))
		}
		raw = v
	}
	var text string
	if json.Unmarshal(raw, &text) == nil {
		return text, nil
	}
	return string(raw), nil
}
