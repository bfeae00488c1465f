package template

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fuzzShellTemplate = `printf '%s\0' {{x}} pre{{x}}suf '{{x}}' "{{x}}" "a {{x}} b" "$(printf '%s' {{x}})" x={{x}} "$(printf '%s' "{{x}}")"`

func fuzzShellWant(v string) string {
	return strings.Join([]string{v, "pre" + v + "suf", v, v, "a " + v + " b", trimNewlines(v), "x=" + v, trimNewlines(v)}, "\x00") + "\x00"
}

// FuzzRenderShell checks through a real /bin/sh that a rendered value
// arrives verbatim, bare and quoted, and never runs. Seeds:
// testdata/fuzz/FuzzRenderShell and, but under -short (where the
// injection table tries them), the injection table's values.
func FuzzRenderShell(f *testing.F) {
	if !testing.Short() {
		for _, v := range hostileValues {
			f.Add(v)
		}
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
		segs, perr := Parse(tmpl)
		for _, s := range segs {
			vars[s.Name] = "v"
		}
		plain, err := RenderPlain(tmpl, vars)
		if (err == nil) != (perr == nil) {
			t.Fatalf("RenderPlain(%q) error = %v, Parse error = %v", tmpl, err, perr)
		}
		shell, err := RenderShell(tmpl, vars)
		if perr != nil {
			if err == nil || err.Error() != perr.Error() {
				t.Fatalf("RenderShell(%q) error = %v, want %v", tmpl, err, perr)
			}
			return
		}
		if err != nil {
			if _, ok := err.(*Error); !ok || err.Error() == "" {
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
