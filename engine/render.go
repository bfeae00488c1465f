package engine

import (
	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/engine/template"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"time"
)

// renderedStep is a step with its templates filled in for one task.
type renderedStep struct {
	step           *pipeline.Step
	command        string
	cleanupCommand string
	env            map[string]string
	with           map[string]any
	defDigest      string
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
	vars["state_dir"] = stateDir
	vars["artifacts_dir"] = filepath.Join(stateDir, "artifacts", taskID)
	return vars, nil
}

// renderSteps fills in every step's templates. Problems are reported per
// step, all at once.
func renderSteps(p *pipeline.Pipeline, vars map[string]string) ([]*renderedStep, error) {
	out := make([]*renderedStep, len(p.Steps))
	var errs []error
	bad := func(s *pipeline.Step, what string, err error) {
		errs = append(errs, &pipeline.Error{File: p.Path, Line: s.Line, Step: s.ID, Msg: fmt.Sprintf("%s: %v", what, err)})
	}
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
		if len(s.Env) > 0 {
			rs.env = make(map[string]string, len(s.Env))
		}
		var err error
		if s.Command != "" {
			if rs.command, err = template.RenderShell(s.Command, sv); err != nil {
				bad(s, "command", err)
			}
		}
		if s.CleanupCommand != "" {
			if rs.cleanupCommand, err = template.RenderShell(s.CleanupCommand, sv); err != nil {
				bad(s, "cleanup_command", err)
			}
		}
		keys := make([]string, 0, len(s.Env))
		for k := range s.Env {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if rs.env[k], err = template.RenderPlain(s.Env[k], sv); err != nil {
				bad(s, "env "+k, err)
			}
		}
		if s.With != nil {
			w, err := renderValue(s.With, sv)
			if err != nil {
				bad(s, "with", err)
			} else {
				rs.with = w.(map[string]any)
			}
		}
		rs.defDigest = definitionDigest(rs)
		out[i] = rs
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
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
