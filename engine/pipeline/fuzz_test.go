package pipeline

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"apollo/engine/template"
)

// FuzzLoad checks that no input makes the loader panic, and that it either
// returns only well-formed *Error values or a pipeline that holds
// every promise validation makes. Seeds: testdata/fuzz/FuzzLoad and every
// pipeline under testdata/load.
func FuzzLoad(f *testing.F) {
	cases, _ := filepath.Glob("testdata/load/*/*.txtar")
	for _, c := range cases {
		data, err := os.ReadFile(c)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range parseArchive(data).Files {
			if file.Name == "pipeline.yaml" {
				f.Add(file.Data)
			}
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		opts := LoadOptions{Vars: map[string]string{"cli": "1"}}
		p, err := parse("pipeline.yaml", "/fuzz", src, opts)
		if err != nil {
			if p != nil {
				t.Fatalf("parse returned a pipeline and an error")
			}
			checkPipelineErrors(t, err, "pipeline.yaml")
			return
		}
		checkValidPipeline(t, p, opts)
	})
}

// checkValidPipeline checks what Load promises about a pipeline it accepts.
func checkValidPipeline(t *testing.T, p *Pipeline, opts LoadOptions) {
	t.Helper()
	if !validName(p.TaskName, ".") {
		t.Fatalf("accepted task_name %q", p.TaskName)
	}
	if len(p.Steps) == 0 {
		t.Fatalf("accepted a pipeline without steps")
	}
	if p.Durability != DurabilityAlways && p.Durability != DurabilityBatch {
		t.Fatalf("accepted durability %q", p.Durability)
	}
	if p.MaxRetries < 0 || p.RetryDelay < 0 || p.MaxRetryDelay < 0 || p.Parallelism < 0 || p.MaxDirtyRestarts < 1 {
		t.Fatalf("accepted out-of-range numbers: %+v", p)
	}
	for _, m := range p.Modules {
		if !filepath.IsLocal(m) {
			t.Fatalf("accepted module folder %q", m)
		}
	}
	vars := map[string]string{}
	for _, k := range template.BuiltinVars() {
		vars[k] = "v"
	}
	maps.Copy(vars, p.Vars)
	maps.Copy(vars, opts.Vars)
	ids := map[string]bool{}
	for _, s := range p.Steps {
		if !validName(s.ID, "") || ids[s.ID] {
			t.Fatalf("accepted id %q (duplicate: %v)", s.ID, ids[s.ID])
		}
		ids[s.ID] = true
		bodies := 0
		for _, b := range []string{s.Command, s.Lua, s.Script, s.Uses} {
			if b != "" {
				bodies++
			}
		}
		if bodies != 1 {
			t.Fatalf("step %q: accepted %d bodies", s.ID, bodies)
		}
		if s.Line < 1 || s.MaxRetries < 0 || s.Timeout < 0 || s.MemoryMB < 0 {
			t.Fatalf("step %q: accepted out-of-range values: %+v", s.ID, s)
		}
		if !slices.Contains([]string{RetryNone, RetryFixed, RetryExponential}, s.RetryPolicy) {
			t.Fatalf("step %q: accepted retry_policy %q", s.ID, s.RetryPolicy)
		}
		for _, path := range []string{s.Script, s.CleanupScript} {
			if path != "" && (!filepath.IsLocal(path) || !strings.HasSuffix(path, ".lua")) {
				t.Fatalf("step %q: accepted script %q", s.ID, path)
			}
		}
		// Whatever validation accepts must render.
		for _, c := range []string{s.Command, s.CleanupCommand} {
			if c == "" {
				continue
			}
			if _, err := template.RenderShell(c, vars); err != nil {
				t.Fatalf("step %q: validation accepted %q but RenderShell fails: %v", s.ID, c, err)
			}
		}
		for k, v := range s.Env {
			if _, err := template.RenderPlain(v, vars); err != nil {
				t.Fatalf("step %q: validation accepted env %s=%q but RenderPlain fails: %v", s.ID, k, v, err)
			}
		}
		if err := renderAll(s.With, vars); err != nil {
			t.Fatalf("step %q: validation accepted with but rendering fails: %v", s.ID, err)
		}
	}
	// Dependencies name earlier-checked steps and form no cycle.
	done := map[string]bool{}
	for progress := true; progress; {
		progress = false
		for _, s := range p.Steps {
			if done[s.ID] {
				continue
			}
			ready := true
			for _, d := range s.DependsOn {
				if !ids[d] || d == s.ID {
					t.Fatalf("step %q: accepted dependency %q", s.ID, d)
				}
				ready = ready && done[d]
			}
			if ready {
				done[s.ID] = true
				progress = true
			}
		}
	}
	if len(done) != len(p.Steps) {
		t.Fatalf("accepted a dependency cycle")
	}
	if p.ResumeFrom != "" && !ids[p.ResumeFrom] {
		t.Fatalf("accepted resume_from %q", p.ResumeFrom)
	}
}

func renderAll(v any, vars map[string]string) error {
	switch x := v.(type) {
	case string:
		_, err := template.RenderPlain(x, vars)
		return err
	case map[string]any:
		for _, e := range x {
			if err := renderAll(e, vars); err != nil {
				return err
			}
		}
	case []any:
		for _, e := range x {
			if err := renderAll(e, vars); err != nil {
				return err
			}
		}
	case nil, bool, int, float64:
	default:
		return errors.New("with holds a value of an unexpected type")
	}
	return nil
}

// fuzzShellTemplate puts one value in every accepted context at once;
// fuzzShellWant is what sh prints for it, NUL-separated.
