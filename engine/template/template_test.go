package template

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestTemplateBuiltinVars(t *testing.T) {
	got := BuiltinVars()
	want := []string{"task_date", "task_id", "task_name", "step_id", "artifacts_dir", "state_dir"}
	if !slices.Equal(got, want) {
		t.Errorf("BuiltinVars() = %q, want %q", got, want)
	}
	got[0] = "changed"
	if BuiltinVars()[0] != "task_date" {
		t.Errorf("BuiltinVars() returns a shared slice")
	}
}

func TestRenderPlain(t *testing.T) {
	vars := map[string]string{"x": "a'b \"c\" $d", "y": "{{x}}", "task_id": "t1", "empty": ""}
	tests := []struct {
		tmpl    string
		want    string
		wantErr string
	}{
		{tmpl: "", want: ""},
		{tmpl: "no placeholders", want: "no placeholders"},
		{tmpl: "{{x}}", want: "a'b \"c\" $d"},
		{tmpl: "{{ x }}", want: "a'b \"c\" $d"},
		{tmpl: "{{\tx\t}}", want: "a'b \"c\" $d"},
		{tmpl: "{{  x}}-{{task_id  }}", want: "a'b \"c\" $d-t1"},
		{tmpl: "{{y}}", want: "{{x}}"}, // never re-expanded
		{tmpl: "<{{empty}}>", want: "<>"},
		{tmpl: "{{x}}}", want: "a'b \"c\" $d}"},
		{tmpl: "}} {", want: "}} {"},
		{tmpl: "a { {b} }", want: "a { {b} }"},
		{tmpl: "{{x}}{{task_id}}", want: "a'b \"c\" $dt1"},
		{tmpl: "{{nope}}", wantErr: "unknown template variable {{nope}}"},
		{tmpl: "{{}}", wantErr: `empty placeholder "{{}}"; write {{name}}`},
		{tmpl: "{{  }}", wantErr: `empty placeholder "{{  }}"; write {{name}}`},
		{tmpl: "{{ x }", wantErr: `unterminated placeholder "{{ x }"; close it with }}`},
		{tmpl: "{{x", wantErr: `unterminated placeholder "{{x"; close it with }}`},
		{tmpl: "a {{", wantErr: `unterminated placeholder "{{"; close it with }}`},
		{tmpl: "{{x\n}}", wantErr: `unterminated placeholder "{{x"; close it with }}`},
		{tmpl: "{{ x } and {{y}}", wantErr: `unterminated placeholder "{{ x } and {{y}}"; close it with }}`},
		{tmpl: "{{1x}}", wantErr: `invalid placeholder "{{1x}}": a name is letters, digits and _, not starting with a digit; for literal braces, put them in a var`},
		{tmpl: "{{a b}}", wantErr: `invalid placeholder "{{a b}}": a name is letters, digits and _, not starting with a digit; for literal braces, put them in a var`},
		{tmpl: "{{.State}}", wantErr: `invalid placeholder "{{.State}}": a name is letters, digits and _, not starting with a digit; for literal braces, put them in a var`},
		{tmpl: "{{{x}}}", wantErr: `invalid placeholder "{{{x}}": a name is letters, digits and _, not starting with a digit; for literal braces, put them in a var`},
		{tmpl: "{{x-y}}", wantErr: `invalid placeholder "{{x-y}}": a name is letters, digits and _, not starting with a digit; for literal braces, put them in a var`},
	}
	for _, tt := range tests {
		got, err := RenderPlain(tt.tmpl, vars)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("RenderPlain(%q) = %q, %v, want error %q", tt.tmpl, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("RenderPlain(%q) = %q, %v, want %q", tt.tmpl, got, err, tt.want)
		}
	}
}

func TestRenderShell(t *testing.T) {
	vars := map[string]string{
		"safe":  "a-b_c/d.e:f=g@h%i+j,k",
		"space": "a b",
		"quote": "it's",
		"dq":    `say "hi" $HOME \ ` + "`x`",
		"empty": "",
		"nul":   "a\x00b",
		"tmpl":  "{{safe}}",
		"n":     "5",
	}
	tests := []struct {
		tmpl    string
		want    string
		wantErr string
	}{
		{tmpl: "echo hi", want: "echo hi"},
		{tmpl: "echo {{safe}}", want: "echo a-b_c/d.e:f=g@h%i+j,k"},
		{tmpl: "echo {{ safe }}", want: "echo a-b_c/d.e:f=g@h%i+j,k"},
		{tmpl: "echo {{space}}", want: "echo 'a b'"},
		{tmpl: "echo {{quote}}", want: `echo 'it'"'"'s'`},
		{tmpl: "echo {{empty}}", want: "echo ''"},
		{tmpl: "echo {{tmpl}}", want: "echo '{{safe}}'"},
		{tmpl: "echo pre{{space}}suf", want: "echo pre'a b'suf"},
		{tmpl: "echo '{{quote}}'", want: `echo 'it'"'"'s'`},
		{tmpl: "echo '{{space}}'", want: "echo 'a b'"},
		{tmpl: "echo '{{empty}}'", want: "echo ''"},
		{tmpl: `echo "{{dq}}"`, want: `echo "say \"hi\" \$HOME \\ \` + "`x\\`" + `"`},
		{tmpl: `echo "{{quote}}"`, want: `echo "it's"`},
		{tmpl: `echo "$(echo {{space}})"`, want: `echo "$(echo 'a b')"`},
		{tmpl: `echo "$(echo "{{space}}")"`, want: `echo "$(echo "a b")"`},
		{tmpl: `echo "it's {{safe}}"`, want: `echo "it's a-b_c/d.e:f=g@h%i+j,k"`},
		{tmpl: `echo "\${{n}}"`, want: `echo "\$5"`},
		{tmpl: `echo \'{{n}}`, want: `echo \'5`},
		{tmpl: "echo {a,{{safe}}}", want: "echo {a,'a-b_c/d.e:f=g@h%i+j,k'}"},
		{tmpl: "echo { {{safe}}; }", want: "echo { a-b_c/d.e:f=g@h%i+j,k; }"},
		{tmpl: "echo $1{{n}} $?{{n}}", want: "echo $15 $?5"},
		{tmpl: "echo ${HOME}{{n}}", want: "echo ${HOME}5"},
		{tmpl: "x=$((1+2)) && echo {{n}}", want: "x=$((1+2)) && echo 5"},
		{tmpl: "# it's a comment\necho {{n}}", want: "# it's a comment\necho 5"},
		{tmpl: "echo a#b {{space}}", want: "echo a#b 'a b'"},
		{tmpl: "cat <<'EOF'\nit's\nEOF\necho {{space}}", want: "cat <<'EOF'\nit's\nEOF\necho 'a b'"},
		{tmpl: "cat <<-EOF\n\tit's\n\tEOF\necho {{space}}", want: "cat <<-EOF\n\tit's\n\tEOF\necho 'a b'"},
		{tmpl: "cat <<A <<B\n'\nA\n\"\nB\necho {{space}}", want: "cat <<A <<B\n'\nA\n\"\nB\necho 'a b'"},
		{tmpl: "cat <<< {{space}}", want: "cat <<< 'a b'"},
		{tmpl: "echo $(case a in a) echo {{space}};; esac)", want: "echo $(case a in a) echo 'a b';; esac)"},
		{tmpl: `echo "$(case a in (a) echo '{{quote}}';; esac)"`, want: `echo "$(case a in (a) echo 'it'"'"'s';; esac)"`},
		{tmpl: "echo a \\\n{{space}}", want: "echo a \\\n'a b'"},
		{tmpl: "echo `date` {{space}}", want: "echo `date` 'a b'"},
		{tmpl: "echo ${x:-'}'} {{space}}", want: "echo ${x:-'}'} 'a b'"},
		{tmpl: "echo $'a' {{space}}", want: "echo $'a' 'a b'"},

		{tmpl: "echo {{nope}}", wantErr: "unknown template variable {{nope}}"},
		{tmpl: "echo {{nul}}", wantErr: "the value of {{nul}} contains a NUL byte"},
		{tmpl: "echo a\x00 {{n}}", wantErr: "the command contains a NUL byte"},
		{tmpl: "echo {{}}", wantErr: `empty placeholder "{{}}"; write {{name}}`},
		{tmpl: "cat <<EOF\n{{n}}\nEOF", wantErr: "{{n}} is inside a heredoc; pass the value through env instead"},
		{tmpl: "cat <<'EOF'\n{{n}}\nEOF", wantErr: "{{n}} is inside a heredoc; pass the value through env instead"},
		{tmpl: "cat <<-EOF\n\t{{n}}\n\tEOF", wantErr: "{{n}} is inside a heredoc; pass the value through env instead"},
		{tmpl: "cat <<EOF; echo hi\nx\n{{n}}", wantErr: "{{n}} is inside a heredoc; pass the value through env instead"},
		{tmpl: "echo \"$(cat <<EOF\n{{n}}\nEOF\n)\"", wantErr: "{{n}} is inside a heredoc; pass the value through env instead"},
		{tmpl: "cat <<{{n}}\nx\n5", wantErr: "{{n}} is in a heredoc delimiter; write the delimiter literally"},
		{tmpl: "cat <<'A{{n}}'\nx\n5", wantErr: "{{n}} is in a heredoc delimiter; write the delimiter literally"},
		{tmpl: "echo `echo {{n}}`", wantErr: "{{n}} is inside backticks; use $(...) instead"},
		{tmpl: "echo \"`echo {{n}}`\"", wantErr: "{{n}} is inside backticks; use $(...) instead"},
		{tmpl: "echo hi # {{n}}", wantErr: "{{n}} is inside a shell comment; take it out of the comment"},
		{tmpl: "echo hi \\\n# {{n}}", wantErr: "{{n}} is inside a shell comment; take it out of the comment"},
		{tmpl: "echo $(echo hi # {{n}}\n)", wantErr: "{{n}} is inside a shell comment; take it out of the comment"},
		{tmpl: "echo ${x:-{{n}}}", wantErr: "{{n}} is inside ${...}; move it out of the parameter expansion"},
		{tmpl: "echo \"${x:-$(echo {{n}})}\"", wantErr: "{{n}} is inside ${...}; move it out of the parameter expansion"},
		{tmpl: "echo $(( {{n}} + 1 ))", wantErr: "{{n}} is inside $((...)); pass the value through env instead"},
		{tmpl: "echo $'{{n}}'", wantErr: "{{n}} is inside $'...'; use '...' instead"},
		{tmpl: "echo $'\\'' {{n}}", wantErr: `{{n}} comes after a backslash inside $'...', which dash and bash read differently; use '...' instead`},
		{tmpl: `echo "${x:-'a'}" {{n}}`, wantErr: `{{n}} comes after a single quote inside "${...}", which dash and bash read differently`},
		{tmpl: "echo \\{{n}}", wantErr: "{{n}} follows a backslash; remove the backslash: apollo quotes values itself"},
		{tmpl: `echo "\{{n}}"`, wantErr: "{{n}} follows a backslash; remove the backslash: apollo quotes values itself"},
		{tmpl: "echo ${{n}}", wantErr: `{{n}} follows "$"; remove the "$": the value is inserted as text, not as a variable name`},
		{tmpl: `echo "${{n}}"`, wantErr: `{{n}} follows "$"; remove the "$": the value is inserted as text, not as a variable name`},
		{tmpl: "echo $HOME{{n}}", wantErr: "{{n}} directly follows $HOME; write ${HOME} so that the value cannot extend the variable name"},
		{tmpl: `echo "$a_1{{n}}"`, wantErr: "{{n}} directly follows $a_1; write ${a_1} so that the value cannot extend the variable name"},
		{tmpl: "echo '{{n}}", wantErr: `unterminated single quote at "'{{n}}"; close it so that apollo can tell how to quote placeholders`},
		{tmpl: `echo "{{n}}`, wantErr: `unterminated double quote at "\"{{n}}"; close it so that apollo can tell how to quote placeholders`},
		{tmpl: "echo $(echo {{n}}", wantErr: `unterminated $( at "$(echo {{n}}"; close it so that apollo can tell how to quote placeholders`},
		{tmpl: "echo {{n}} `date", wantErr: "unterminated backtick at \"`date\"; close it so that apollo can tell how to quote placeholders"},
		{tmpl: "echo {{n}} \"$(echo; case)\"", wantErr: `unterminated double quote at "\""; close it so that apollo can tell how to quote placeholders`},
		{tmpl: "cat << \necho {{n}}", wantErr: "{{n}} comes after a heredoc operator << without a delimiter"},
	}
	for _, tt := range tests {
		got, err := RenderShell(tt.tmpl, vars)
		if tt.wantErr != "" {
			if err == nil || err.Error() != tt.wantErr {
				t.Errorf("RenderShell(%q) = %q, %v, want error %q", tt.tmpl, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("RenderShell(%q) = %q, %v, want %q", tt.tmpl, got, err, tt.want)
		}
	}
}

// hostileValues are values a --var or a var may hold. None may run code or
// lose a byte, whatever quotes surround its placeholder.
var hostileValues = []string{
	"plain", "a b", "  two  spaces  ", "a;echo INJECTED", "a && echo INJECTED", "a | echo INJECTED",
	"$(echo INJECTED)", "`echo INJECTED`", "${HOME}", "$HOME", "$", "$$", "$(", "${",
	"'", `"`, `\`, `\\`, `\'`, `\"`, "\\\n", "''", `""`,
	"'; echo INJECTED; '", `"; echo INJECTED; "`, `'$(echo INJECTED)'`, `"$(echo INJECTED)"`,
	"a\nb", "\n", "trailing\n", "\necho INJECTED", "\n#", "a\tb", "\r\n",
	"*", "?", "[a]", "~", "~root", "~/x", "-n", "-e", "--", "-", "", " ",
	"ünïcødé ✓", "\xff\xfe", "{{task_id}}", "}}", "{{", "{a,b}", "%s%d%%", "=", "a=b", "!", "#", "a #b", "&", ";", "|", "<", ">", "(", ")",
	"<<EOF", "$((1+1))", "$'\\x41'", "a;touch \"$CANARY\"", "$(touch \"$CANARY\")", "`touch \"$CANARY\"`",
	"'; touch \"$CANARY\"; '", "\"; touch \"$CANARY\"; \"", "\"$(touch \"$CANARY\")\"", "'$(touch \"$CANARY\")'",
	"\\\"$(touch \"$CANARY\")\\\"",
}

// shellContexts renders each placeholder context that RenderShell accepts;
// want is what printf prints for value v.
var injectionContexts = []struct {
	name string
	tmpl string
	want func(v string) string
}{
	{"bare", `printf '%s' {{x}}`, func(v string) string { return v }},
	{"prefix-suffix", `printf '%s' pre{{x}}suf`, func(v string) string { return "pre" + v + "suf" }},
	{"twice", `printf '%s' {{x}}{{x}}`, func(v string) string { return v + v }},
	{"single", `printf '%s' '{{x}}'`, func(v string) string { return v }},
	{"single-words", `printf '%s' 'pre {{x}} post'`, func(v string) string { return "pre " + v + " post" }},
	{"double", `printf '%s' "{{x}}"`, func(v string) string { return v }},
	{"double-words", `printf '%s' "pre {{x}} post"`, func(v string) string { return "pre " + v + " post" }},
	{"double-after-dollar", `printf '%s' "\${{x}}"`, func(v string) string { return "$" + v }},
	{"mixed", `printf '%s' a'{{x}}'"{{x}}"{{x}}`, func(v string) string { return "a" + v + v + v }},
	{"subst", `printf '%s' "$(printf '%s' {{x}})"`, trimNewlines},
	{"subst-single", `printf '%s' "$(printf '%s' '{{x}}')"`, trimNewlines},
	{"subst-double", `printf '%s' "$(printf '%s' "{{x}}")"`, trimNewlines},
	{"subst-nested", `printf '%s' "$(printf '%s' "$(printf '%s' {{x}})")"`, trimNewlines},
	{"subst-case", `printf '%s' "$(case a in a) printf '%s' {{x}};; esac)"`, trimNewlines},
	{"assignment", `x={{x}}; printf '%s' "$x"`, func(v string) string { return v }},
	{"env-prefix", `X={{x}} sh -c 'printf "%s" "$X"'`, func(v string) string { return v }},
	{"after-heredoc", "cat <<'EOF'\nit's \"{\nEOF\nprintf '%s' {{x}}", func(v string) string { return "it's \"{\n" + v }},
	{"after-comment", "# it's\nprintf '%s' {{x}}", func(v string) string { return v }},
	{"brace", `printf '%s|' {a,{{x}}}`, func(v string) string { return "{a," + v + "}|" }},
	{"redirect", `printf '%s' {{x}} > "$OUT"; cat "$OUT"`, func(v string) string { return v }},
	{"heredoc-line", "cat <<EOF >/dev/null; printf '%s' {{x}}\nit's $(x) \"\nEOF", func(v string) string { return v }},
	{"after-constructs", ": \"${X:-a}\" ${X:-'}'} `true` $((1+(2))) $'a' $(case a in a) :;; esac) \\' # it's\nprintf '%s' {{x}}", func(v string) string { return v }},
	{"if-then", "if true; then printf '%s' \"{{x}}\"; else :; fi", func(v string) string { return v }},
	{"pipe", "printf '%s' {{x}} | cat", func(v string) string { return v }},
}

func trimNewlines(v string) string { return strings.TrimRight(v, "\n") }

// runSh runs a rendered command with /bin/sh and returns its stdout.
func runSh(t testing.TB, dir, rendered string) string {
	t.Helper()
	cmd := exec.Command("sh", "-c", rendered)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/nonexistent-home",
		"CANARY=" + filepath.Join(dir, "canary"), "OUT=" + filepath.Join(dir, "out")}
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("sh -c %q: %v", rendered, err)
	}
	return string(out)
}

// shortValues is the part of hostileValues that case i of a table of
// cases tries: all of them, or under -short every k-th (k = cases, at most
// 12), a different k-th for each case, so that each value and each case
// is still tried (each try is a sh process; the whole product is
// thousands).
func shortValues(i, cases int) []string {
	if !testing.Short() {
		return hostileValues
	}
	k := min(cases, 12)
	var vs []string
	for j := i % k; j < len(hostileValues); j += k {
		vs = append(vs, hostileValues[j])
	}
	return vs
}

func TestRenderShellInjection(t *testing.T) {
	for i, c := range injectionContexts {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for _, v := range shortValues(i, len(injectionContexts)) {
				rendered, err := RenderShell(c.tmpl, map[string]string{"x": v})
				if err != nil {
					t.Errorf("RenderShell(%q, x=%q): %v", c.tmpl, v, err)
					continue
				}
				got := runSh(t, dir, rendered)
				if want := c.want(v); got != want {
					t.Errorf("value %q: sh -c %q printed %q, want %q", v, rendered, got, want)
				}
				if _, err := os.Stat(filepath.Join(dir, "canary")); err == nil {
					t.Fatalf("value %q: sh -c %q created the canary file", v, rendered)
				}
			}
		})
	}
}

// TestRenderShellUnquotedSubst covers $(echo {{x}}) used unquoted: the
// output is split and globbed by the author's choice, but no value may run.
func TestRenderShellUnquotedSubst(t *testing.T) {
	dir := t.TempDir()
	tmpls := []string{`echo $(echo {{x}})`, `echo $(echo "{{x}}")`, `echo $(echo '{{x}}') >/dev/null`}
	for i, tmpl := range tmpls {
		for _, v := range shortValues(i, len(tmpls)) {
			rendered, err := RenderShell(tmpl, map[string]string{"x": v})
			if err != nil {
				t.Errorf("RenderShell(%q, x=%q): %v", tmpl, v, err)
				continue
			}
			got := runSh(t, dir, rendered)
			for line := range strings.Lines(got) {
				if strings.TrimSpace(line) == "INJECTED" {
					t.Errorf("value %q: sh -c %q ran injected code: %q", v, rendered, got)
				}
			}
			if _, err := os.Stat(filepath.Join(dir, "canary")); err == nil {
				t.Fatalf("value %q: sh -c %q created the canary file", v, rendered)
			}
		}
	}
}

func TestRenderShellWord(t *testing.T) {
	tests := []struct {
		v     string
		force bool
		want  string
	}{
		{v: "abc", want: "abc"},
		{v: "A-Z_0.9/x:y=z@w%v+u,t", want: "A-Z_0.9/x:y=z@w%v+u,t"},
		{v: "abc", force: true, want: "'abc'"},
		{v: "", want: "''"},
		{v: "a b", want: "'a b'"},
		{v: "'", want: `''"'"''`},
		{v: "ü", want: "'ü'"},
		{v: "~", want: "'~'"},
	}
	for _, tt := range tests {
		if got := shellWord(tt.v, tt.force); got != tt.want {
			t.Errorf("shellWord(%q, %v) = %q, want %q", tt.v, tt.force, got, tt.want)
		}
	}
}

func TestOutputRef(t *testing.T) {
	tests := []struct {
		name, step, key string
		ok              bool
	}{
		{name: "outputs.fetch", step: "fetch", ok: true},
		{name: "outputs.fetch.rows", step: "fetch", key: "rows", ok: true},
		{name: "outputs.fetch-2.row_count", step: "fetch-2", key: "row_count", ok: true},
		{name: "outputs."},
		{name: "outputs.a.b.c"},
		{name: "outputs.a b"},
		{name: "vars.x"},
	}
	for _, tt := range tests {
		step, key, ok := OutputRef(tt.name)
		if step != tt.step || key != tt.key || ok != tt.ok {
			t.Errorf("OutputRef(%q) = %q, %q, %v; want %q, %q, %v", tt.name, step, key, ok, tt.step, tt.key, tt.ok)
		}
	}
	got, err := RenderShell("wc -l {{outputs.fetch.file}}", map[string]string{"outputs.fetch.file": "a b.csv"})
	if want := "wc -l 'a b.csv'"; err != nil || got != want {
		t.Errorf("RenderShell with an output = %q, %v; want %q", got, err, want)
	}
	if _, err := Parse("{{outputs.a.b.c}}"); err == nil || !strings.Contains(err.Error(), "{{outputs.STEP.KEY}}") {
		t.Errorf("Parse(outputs.a.b.c) error = %v, want the form of an output placeholder", err)
	}
}
