package engine

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// FuzzLoad checks that no input makes the loader panic, and that it either
// returns only well-formed *PipelineError values or a pipeline that holds
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
	for _, k := range BuiltinVars() {
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
			if _, err := RenderShell(c, vars); err != nil {
				t.Fatalf("step %q: validation accepted %q but RenderShell fails: %v", s.ID, c, err)
			}
		}
		for k, v := range s.Env {
			if _, err := RenderPlain(v, vars); err != nil {
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
		_, err := RenderPlain(x, vars)
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
const fuzzShellTemplate = `printf '%s\0' {{x}} pre{{x}}suf '{{x}}' "{{x}}" "a {{x}} b" "$(printf '%s' {{x}})" x={{x}} "$(printf '%s' "{{x}}")"`

func fuzzShellWant(v string) string {
	return strings.Join([]string{v, "pre" + v + "suf", v, v, "a " + v + " b", trimNewlines(v), "x=" + v, trimNewlines(v)}, "\x00") + "\x00"
}

// FuzzRenderShell checks through a real /bin/sh that a rendered value
// arrives verbatim, bare and quoted, and never runs. Seeds:
// testdata/fuzz/FuzzRenderShell and the injection table's values.
func FuzzRenderShell(f *testing.F) {
	for _, v := range hostileValues {
		f.Add(v)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, v string) {
		rendered, err := RenderShell(fuzzShellTemplate, map[string]string{"x": v})
		if strings.IndexByte(v, 0) >= 0 {
			if err == nil {
				t.Fatalf("RenderShell accepted a value with a NUL byte")
			}
			return
		}
		if err != nil {
			t.Fatalf("RenderShell(x=%q): %v", v, err)
		}
		got := runSh(t, dir, rendered)
		if want := fuzzShellWant(v); got != want {
			t.Fatalf("value %q: sh -c %q printed %q, want %q", v, rendered, got, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "canary")); err == nil {
			t.Fatalf("value %q: sh -c %q created the canary file", v, rendered)
		}
	})
}

// FuzzTemplate checks that no template makes the renderers panic, that
// they agree on what is a placeholder, and that a template RenderShell
// accepts renders a bare-safe value as RenderPlain does, give or take
// forced quotes.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"echo {{x}}", "{{ x }}", "{{}}", "{{ x }", "cat <<EOF\n{{x}}\nEOF", "echo \"$(echo '{{x}}')\"",
		"echo `{{x}}`", "echo ${x:-{{x}}}", "echo $(( {{x}} ))", "case a in a) echo {{x}};; esac", "echo $'\\'' {{x}}", "# {{x}}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, tmpl string) {
		vars := map[string]string{}
		segs, perr := parseTemplate(tmpl)
		for _, s := range segs {
			vars[s.name] = "v"
		}
		plain, err := RenderPlain(tmpl, vars)
		if (err == nil) != (perr == nil) {
			t.Fatalf("RenderPlain(%q) error = %v, parseTemplate error = %v", tmpl, err, perr)
		}
		shell, err := RenderShell(tmpl, vars)
		if perr != nil {
			if err == nil || err.Error() != perr.Error() {
				t.Fatalf("RenderShell(%q) error = %v, want %v", tmpl, err, perr)
			}
			return
		}
		if err != nil {
			if _, ok := err.(*templateError); !ok || err.Error() == "" {
				t.Fatalf("RenderShell(%q) error %v is a %T", tmpl, err, err)
			}
			return
		}
		if !bytes.Equal([]byte(strings.ReplaceAll(shell, "'v'", "v")), []byte(plain)) && !strings.Contains(tmpl, "'") {
			t.Fatalf("RenderShell(%q) = %q, RenderPlain = %q", tmpl, shell, plain)
		}
	})
}

// shellPreludes are harmless shell constructs that print nothing; each
// leaves the lexer in a state it must get right for what follows.
var shellPreludes = []string{
	`: 'it"s'`,
	`: "it's $(printf '%s' ')')"`,
	"cat <<'E' >/dev/null\n'\"$(\nE",
	"cat <<-E >/dev/null\n\t\"'\n\tE",
	"cat <<'E' >/dev/null\n`\nE",
	"cat <<A <<B >/dev/null\n'\nA\n\"\nB",
	"# it's \"quoted",
	`: ${X:-"a}"}`,
	`: $(( (1) + 2 ))`,
	": `printf '%s' \"'\"`",
	`: $(case a in a) echo "'";; (b) :;; esac)`,
	`: \' \" \$ \` + "`",
	`{ :; }`,
	`: a#b'c'`,
	`: $'x'`,
	`: "\"'"`,
	`: "$(: "$(: ')')")"`,
	"if true; then :; fi",
	": \\\n# it's",
}

// shellWraps put the placeholder in each context RenderShell accepts.
var shellWraps = []struct {
	tmpl string
	want func(v string) string
}{
	{`{{x}}`, func(v string) string { return v }},
	{`'{{x}}'`, func(v string) string { return v }},
	{`"{{x}}"`, func(v string) string { return v }},
	{`"$(printf '%s' {{x}})"`, trimNewlines},
	{`"$(printf '%s' "{{x}}")"`, trimNewlines},
	{`"$(printf '%s' '{{x}}')"`, trimNewlines},
	{`a{{x}}"{{x}}"'{{x}}'`, func(v string) string { return "a" + v + v + v }},
}

// FuzzRenderShellContexts runs, through a real /bin/sh, commands made of a
// fuzzed sequence of preludes then a placeholder in a fuzzed context, so
// that a lexer that lost track of quoting would show as a changed value.
func FuzzRenderShellContexts(f *testing.F) {
	f.Add([]byte{0, 1, 2}, "a'b")
	f.Add([]byte{5, 3}, "$(echo INJECTED)")
	f.Add([]byte{9, 4}, "\"; echo INJECTED; \"")
	f.Add([]byte{6, 7, 8, 5}, "`touch \"$CANARY\"`")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, choice []byte, v string) {
		if len(choice) == 0 || len(choice) > 8 || strings.IndexByte(v, 0) >= 0 {
			return
		}
		var b strings.Builder
		for _, c := range choice[:len(choice)-1] {
			b.WriteString(shellPreludes[int(c)%len(shellPreludes)])
			b.WriteString("\n")
		}
		wrap := shellWraps[int(choice[len(choice)-1])%len(shellWraps)]
		b.WriteString(`printf '%s' ` + wrap.tmpl)
		rendered, err := RenderShell(b.String(), map[string]string{"x": v})
		if err != nil {
			t.Fatalf("RenderShell(%q): %v", b.String(), err)
		}
		if got, want := runSh(t, dir, rendered), wrap.want(v); got != want {
			t.Fatalf("sh -c %q printed %q, want %q", rendered, got, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "canary")); err == nil {
			t.Fatalf("sh -c %q created the canary file", rendered)
		}
	})
}
