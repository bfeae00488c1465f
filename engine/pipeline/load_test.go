package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// updateGolden is set by APOLLO_UPDATE_GOLDEN=1: tests rewrite their
// golden files instead of comparing.
var updateGolden = os.Getenv("APOLLO_UPDATE_GOLDEN") == "1"

// TestLoadBad loads each testdata/load/bad/*.txtar case: its pipeline.yaml
// (and any other files) written to a fresh folder, the --var names from its
// "vars" section. The error must hold only *Error values, sorted by
// line, and read exactly like the "want" section (with the folder removed).
func TestLoadBad(t *testing.T) {
	files, err := filepath.Glob("testdata/load/bad/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 30 {
		t.Fatalf("found %d cases in testdata/load/bad, want at least 30", len(files))
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".txtar")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			ar := parseArchive(data)
			dir := t.TempDir()
			vars := map[string]string{}
			wantIdx := -1
			for i, f := range ar.Files {
				switch f.Name {
				case "want":
					wantIdx = i
				case "vars":
					for line := range strings.Lines(string(f.Data)) {
						k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
						vars[k] = v
					}
				default:
					writeFile(t, filepath.Join(dir, f.Name), f.Data)
				}
			}
			if wantIdx < 0 {
				t.Fatal("no want section")
			}
			path := filepath.Join(dir, "pipeline.yaml")
			p, err := Load(path, LoadOptions{Vars: vars})
			if err == nil {
				t.Fatalf("Load() = %+v, nil; want an error", p)
			}
			if p != nil {
				t.Errorf("Load() returned a pipeline with its error")
			}
			checkPipelineErrors(t, err, path)
			got := strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "") + "\n"
			if updateGolden {
				ar.Files[wantIdx].Data = []byte(got)
				if err := os.WriteFile(file, ar.format(), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if want := string(ar.Files[wantIdx].Data); got != want {
				t.Errorf("Load() error =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// archive is a txtar file (the format of golang.org/x/tools/txtar): a
// comment, then files each introduced by a "-- name --" line.
type archive struct {
	Comment []byte
	Files   []archiveFile
}

type archiveFile struct {
	Name string
	Data []byte
}

func parseArchive(data []byte) *archive {
	a := &archive{}
	cur := &a.Comment
	for line := range strings.Lines(string(data)) {
		trimmed := strings.TrimRight(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) >= 6 {
			a.Files = append(a.Files, archiveFile{Name: strings.TrimSpace(trimmed[3 : len(trimmed)-3])})
			cur = &a.Files[len(a.Files)-1].Data
			continue
		}
		*cur = append(*cur, line...)
	}
	return a
}

func (a *archive) format() []byte {
	var b bytes.Buffer
	b.Write(a.Comment)
	for _, f := range a.Files {
		fmt.Fprintf(&b, "-- %s --\n", f.Name)
		b.Write(f.Data)
		if len(f.Data) > 0 && f.Data[len(f.Data)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// checkPipelineErrors checks that err joins *Error values only,
// for file, each well formed, sorted by line.
func checkPipelineErrors(t testing.TB, err error, file string) {
	t.Helper()
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	if _, ok := errors.AsType[*Error](err); !ok {
		t.Errorf("errors.As(%v, *Error) = false", err)
	}
	prev := 0
	for _, e := range list {
		pe, ok := e.(*Error)
		if !ok {
			t.Errorf("error %q is a %T, want *Error", e, e)
			continue
		}
		if pe.File != file {
			t.Errorf("error %q: File = %q, want %q", pe, pe.File, file)
		}
		if pe.Line < prev {
			t.Errorf("error %q: line %d comes after line %d", pe, pe.Line, prev)
		}
		prev = pe.Line
		if pe.Msg == "" || strings.HasSuffix(pe.Msg, ".") || strings.ToLower(pe.Msg[:1]) != pe.Msg[:1] {
			t.Errorf("error %q: message must be lower-case with no trailing period", pe)
		}
	}
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadErrorFormat(t *testing.T) {
	tests := []struct {
		e    Error
		want string
	}{
		{Error{File: "p.yaml", Line: 12, Step: "load", Msg: `depends on unknown step "fech"`}, `p.yaml:12: step "load": depends on unknown step "fech"`},
		{Error{File: "p.yaml", Line: 3, Msg: "unknown key"}, `p.yaml:3: unknown key`},
		{Error{File: "p.yaml", Step: "a", Msg: "x"}, `p.yaml: step "a": x`},
		{Error{File: "dir/p.yaml", Msg: "is a directory"}, `dir/p.yaml: is a directory`},
		{Error{Msg: "bare"}, `bare`},
	}
	for _, tt := range tests {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

// loadString writes src to a fresh pipeline.yaml and loads it.
func loadString(t *testing.T, src string, opts LoadOptions) (*Pipeline, string, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "pipeline.yaml")
	writeFile(t, path, []byte(src))
	p, err := Load(path, opts)
	return p, path, err
}

// TestLoadGood checks whole pipelines, every default applied.
func TestLoadGood(t *testing.T) {
	tests := []struct {
		name string
		src  string
		opts LoadOptions
		want Pipeline // Path, Dir and Source are checked apart
	}{
		{
			name: "minimal",
			src:  "task_name: t\nsteps:\n  - id: a\n    command: echo hi\n",
			want: Pipeline{TaskName: "t", RetryDelay: 10 * time.Second, Durability: "always", Vars: map[string]string{}, MaxDirtyRestarts: 3,
				Steps: []*Step{{ID: "a", Line: 3, Command: "echo hi", RetryPolicy: "none", Durability: "always"}}},
		},
		{
			name: "defaults, env and working_dir",
			src: `task_name: t
max_retries: 1
defaults:
  retry_policy: fixed
  max_retries: 2
  timeout_seconds: 30
  memory_mb: 64
  env: {A: a, B: b}
working_dir: sub
steps:
  - id: a
    command: echo hi
  - id: b
    command: echo hi
    retry_policy: none
    max_retries: 0
    timeout_seconds: 5
    env: {B: bb, C: c}
    working_dir: ..
  - id: c
    lua: return 1
`,
			want: Pipeline{TaskName: "t", MaxRetries: 1, RetryDelay: 10 * time.Second, Durability: "always", Vars: map[string]string{}, MaxDirtyRestarts: 3,
				Defaults: Defaults{RetryPolicy: "fixed", MaxRetries: 2, Timeout: 30 * time.Second, MemoryMB: 64,
					Env: map[string]string{"A": "a", "B": "b"}, WorkingDir: "sub"},
				Steps: []*Step{
					{ID: "a", Line: 11, Command: "echo hi", RetryPolicy: "fixed", MaxRetries: 2, Durability: "always", Timeout: 30 * time.Second,
						MemoryMB: 64, Env: map[string]string{"A": "a", "B": "b"}, WorkingDir: "sub"},
					{ID: "b", Line: 13, Command: "echo hi", RetryPolicy: "none", Durability: "always", Timeout: 5 * time.Second,
						MemoryMB: 64, Env: map[string]string{"A": "a", "B": "bb", "C": "c"}, WorkingDir: ".."},
					{ID: "c", Line: 20, LuaLine: 21, Lua: "return 1", RetryPolicy: "fixed", MaxRetries: 2, Durability: "always", Timeout: 30 * time.Second,
						MemoryMB: 64, Env: map[string]string{"A": "a", "B": "b"}},
				}},
		},
		{
			name: "spec example",
			src: `task_name: daily_data_pipeline      # required; [A-Za-z0-9_.-]+
max_retries: 3                      # default 0; a step may override
retry_delay_seconds: 10             # base delay for fixed / exponential
max_retry_delay_seconds: 300        # optional cap
parallelism: 4                      # most steps running at once; default: CPU count
durability: always                  # always | batch (see 4); a step may override
vars: {region: eu}                  # template defaults; --var k=v overrides
resume_from: load                   # optional manual override (see 5)
max_dirty_restarts: 3               # crash-loop guard (see 5)
modules: [lib]                      # extra Lua module folders, relative to this file
steps:
  - id: fetch_raw                   # required, unique; [A-Za-z0-9_-]+
    command: "python steps/fetch_raw.py --date {{task_date}}"   # run by /bin/sh -c
    depends_on: []
    optional: false
    timeout_seconds: 600            # per attempt; 0 or absent = none
    retry_policy: exponential       # none | fixed | exponential (default none)
    cleanup_command: "rm -f {{artifacts_dir}}/raw.csv"
  - id: load
    lua: |                          # inline Lua body
      local idem = require("apollo.idem")
      idem.write(ctx.artifacts_dir .. "/loaded.txt", "ok")
    depends_on: [fetch_raw]
  - id: notify
    uses: notify                    # a Lua step module: pipeline modules, then bundled scripts/
    with: {channel: ops}
    depends_on: [load]
    optional: true
`,
			want: Pipeline{
				TaskName: "daily_data_pipeline", MaxRetries: 3, RetryDelay: 10 * time.Second, MaxRetryDelay: 300 * time.Second,
				Parallelism: 4, Durability: "always", Vars: map[string]string{"region": "eu"}, ResumeFrom: "load",
				MaxDirtyRestarts: 3, Modules: []string{"lib"},
				Steps: []*Step{
					{ID: "fetch_raw", Line: 12, Command: "python steps/fetch_raw.py --date {{task_date}}",
						CleanupCommand: "rm -f {{artifacts_dir}}/raw.csv", Timeout: 600 * time.Second,
						RetryPolicy: "exponential", MaxRetries: 3, Durability: "always"},
					{ID: "load", Line: 19, LuaLine: 21, Lua: "local idem = require(\"apollo.idem\")\nidem.write(ctx.artifacts_dir .. \"/loaded.txt\", \"ok\")\n",
						DependsOn: []string{"fetch_raw"}, RetryPolicy: "none", MaxRetries: 3, Durability: "always"},
					{ID: "notify", Line: 24, Uses: "notify", With: map[string]any{"channel": "ops"}, DependsOn: []string{"load"},
						Optional: true, RetryPolicy: "none", MaxRetries: 3, Durability: "always"},
				},
			},
		},
		{
			name: "overrides and defaults",
			src: `task_name: a.b-c_d
durability: batch
max_retries: 2
retry_delay_seconds: 0.2
max_dirty_restarts: 1
isolation: process
modules: [lib/lua, ./more, .]
vars:
  region: eu
  n: 5
  on: true
  date: 2024-01-02
  task_date: "2024-03-04"
steps:
  - id: 0x10
    command: "echo {{ region }} {{n}} {{on}} {{date}} {{step_id}} {{state_dir}} {{task_name}} {{from_cli}}"
    durability: always
    max_retries: 0
    retry_policy: fixed
    timeout_seconds: 1.5
    env: {A: "{{task_id}}", B: 1, C_1: "x"}
  - id: lua-step
    lua: return 1
    memory_mb: 64
    depends_on: ["0x10"]
  - id: inline
    script: steps/x.lua
    isolation: inprocess
    cleanup_script: ./steps/undo.lua
  - id: mod
    uses: pkg.sub_mod
    isolation: ""
    cleanup_lua: print(1)
    depends_on: null
    env: ~
`,
			opts: LoadOptions{Vars: map[string]string{"from_cli": "x"}},
			want: Pipeline{
				TaskName: "a.b-c_d", MaxRetries: 2, RetryDelay: 200 * time.Millisecond, Durability: "batch",
				Vars:             map[string]string{"region": "eu", "n": "5", "on": "true", "date": "2024-01-02", "task_date": "2024-03-04"},
				MaxDirtyRestarts: 1, Modules: []string{"lib/lua", "more", "."}, Isolation: "process",
				Steps: []*Step{
					{ID: "0x10", Line: 15, Command: "echo {{ region }} {{n}} {{on}} {{date}} {{step_id}} {{state_dir}} {{task_name}} {{from_cli}}",
						Timeout: 1500 * time.Millisecond, RetryPolicy: "fixed", MaxRetries: 0, Durability: "always",
						Env: map[string]string{"A": "{{task_id}}", "B": "1", "C_1": "x"}},
					{ID: "lua-step", Line: 22, LuaLine: 23, Lua: "return 1", MemoryMB: 64, DependsOn: []string{"0x10"},
						RetryPolicy: "none", MaxRetries: 2, Durability: "batch", Isolation: "process"},
					{ID: "inline", Line: 26, Script: "steps/x.lua", CleanupScript: "steps/undo.lua", Isolation: "inprocess",
						RetryPolicy: "none", MaxRetries: 2, Durability: "batch"},
					{ID: "mod", Line: 30, Uses: "pkg.sub_mod", CleanupLua: "print(1)", CleanupLuaLine: 33, Isolation: "",
						RetryPolicy: "none", MaxRetries: 2, Durability: "batch"},
				},
			},
		},
		{
			name: "with values become plain Go types",
			src: `task_name: t
steps:
  - id: n
    uses: notify
    with:
      s: text
      q: "42"
      i: 42
      neg: -7
      hex: 0x1F
      f: 2.5
      b: true
      yes: yes
      nil: null
      date: 2024-01-02
      list: [1, two, {three: 3}]
      map: {a: {b: [x]}}
      tmpl: "{{task_id}}/{{ step_id }}"
`,
			want: Pipeline{TaskName: "t", RetryDelay: 10 * time.Second, Durability: "always", Vars: map[string]string{}, MaxDirtyRestarts: 3,
				Steps: []*Step{{ID: "n", Line: 3, Uses: "notify", RetryPolicy: "none", Durability: "always",
					With: map[string]any{"s": "text", "q": "42", "i": 42, "neg": -7, "hex": 31, "f": 2.5, "b": true, "yes": "yes",
						"nil": nil, "date": "2024-01-02", "list": []any{1, "two", map[string]any{"three": 3}},
						"map": map[string]any{"a": map[string]any{"b": []any{"x"}}}, "tmpl": "{{task_id}}/{{ step_id }}"}}}},
		},
		{
			name: "anchors, aliases and merge keys",
			src: `task_name: t
steps:
  - &base
    id: a
    command: echo a
    timeout_seconds: 5
    retry_policy: fixed
    env: &env {REGION: eu}
  - <<: *base
    id: b
    command: echo b
    env: *env
  - <<: [{id: ignored, optional: true}, *base]
    id: c
    depends_on: [a, b]
`,
			want: Pipeline{TaskName: "t", RetryDelay: 10 * time.Second, Durability: "always", Vars: map[string]string{}, MaxDirtyRestarts: 3,
				Steps: []*Step{
					{ID: "a", Line: 4, Command: "echo a", Timeout: 5 * time.Second, RetryPolicy: "fixed", Durability: "always", Env: map[string]string{"REGION": "eu"}},
					{ID: "b", Line: 10, Command: "echo b", Timeout: 5 * time.Second, RetryPolicy: "fixed", Durability: "always", Env: map[string]string{"REGION": "eu"}},
					{ID: "c", Line: 14, Command: "echo a", Timeout: 5 * time.Second, RetryPolicy: "fixed", Durability: "always", Env: map[string]string{"REGION": "eu"},
						Optional: true, DependsOn: []string{"a", "b"}},
				}},
		},
		{
			name: "explicit document markers and a trailing empty document",
			src:  "---\ntask_name: t\nsteps:\n  - id: a\n    command: echo hi\n...\n---\n",
			want: Pipeline{TaskName: "t", RetryDelay: 10 * time.Second, Durability: "always", Vars: map[string]string{}, MaxDirtyRestarts: 3,
				Steps: []*Step{{ID: "a", Line: 4, Command: "echo hi", RetryPolicy: "none", Durability: "always"}}},
		},
		{
			name: "a diamond is not a cycle",
			src: `task_name: t
steps:
  - {id: d, command: x, depends_on: [b, c]}
  - {id: b, command: x, depends_on: [a]}
  - {id: c, command: x, depends_on: [a]}
  - {id: a, command: x}
`,
			want: Pipeline{TaskName: "t", RetryDelay: 10 * time.Second, Durability: "always", Vars: map[string]string{}, MaxDirtyRestarts: 3,
				Steps: []*Step{
					{ID: "d", Line: 3, Command: "x", DependsOn: []string{"b", "c"}, RetryPolicy: "none", Durability: "always"},
					{ID: "b", Line: 4, Command: "x", DependsOn: []string{"a"}, RetryPolicy: "none", Durability: "always"},
					{ID: "c", Line: 5, Command: "x", DependsOn: []string{"a"}, RetryPolicy: "none", Durability: "always"},
					{ID: "a", Line: 6, Command: "x", RetryPolicy: "none", Durability: "always"},
				}},
		},
		{
			name: "shell contexts that are safe",
			src: `task_name: t
vars: {q: x}
steps:
  - id: a
    command: |
      cat <<'EOF'
      literal {braces} and $dollars
      EOF
      printf '%s\n' {{q}} '{{q}}' "{{q}}" "$(echo {{q}})" pre{{q}}post
    cleanup_command: "rm -f '{{artifacts_dir}}/x' # done"
`,
			want: Pipeline{TaskName: "t", RetryDelay: 10 * time.Second, Durability: "always", Vars: map[string]string{"q": "x"}, MaxDirtyRestarts: 3,
				Steps: []*Step{{ID: "a", Line: 4, RetryPolicy: "none", Durability: "always",
					Command:        "cat <<'EOF'\nliteral {braces} and $dollars\nEOF\nprintf '%s\\n' {{q}} '{{q}}' \"{{q}}\" \"$(echo {{q}})\" pre{{q}}post\n",
					CleanupCommand: "rm -f '{{artifacts_dir}}/x' # done"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, path, err := loadString(t, tt.src, tt.opts)
			if err != nil {
				t.Fatalf("Load() error: %v", err)
			}
			if got.Path != path {
				t.Errorf("Path = %q, want %q", got.Path, path)
			}
			if got.Dir != filepath.Dir(path) || !filepath.IsAbs(got.Dir) {
				t.Errorf("Dir = %q, want %q", got.Dir, filepath.Dir(path))
			}
			if string(got.Source) != tt.src {
				t.Errorf("Source = %q, want the file's bytes", got.Source)
			}
			got.Path, got.Dir, got.Source = "", "", nil
			for _, s := range got.Steps {
				// The resolved dependencies name the steps of DependsOn.
				var ids []string
				for _, j := range s.depIdx {
					ids = append(ids, got.Steps[j].ID)
				}
				if !slices.Equal(ids, s.DependsOn) {
					t.Errorf("step %s: dependencies resolve to %q, want %q", s.ID, ids, s.DependsOn)
				}
				s.depIdx = nil
			}
			if !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("Load() =\n%s\nwant\n%s", dumpPipeline(got), dumpPipeline(&tt.want))
			}
		})
	}
}

func dumpPipeline(p *Pipeline) string {
	q := *p
	q.Steps = nil
	s := fmt.Sprintf("%+v", q)
	for _, st := range p.Steps {
		s += fmt.Sprintf("\n  step %+v", *st)
	}
	return s
}

// TestLoadRelativePath checks that File is the path as the user gave it and
// that Dir is absolute.
func TestLoadRelativePath(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "sub", "p.yaml"), []byte("task_name: t\nsteps:\n  - id: a\n    command: echo hi\n  - id: b\n    comand: x\n"))
	t.Chdir(dir)
	_, err := Load(filepath.Join("sub", "p.yaml"), LoadOptions{})
	want := filepath.Join("sub", "p.yaml") + `:6: step "b": unknown key "comand" (did you mean "command"?)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("Load() error = %v, want it to contain %q", err, want)
	}
	writeFile(t, filepath.Join(dir, "sub", "p.yaml"), []byte("task_name: t\nsteps:\n  - id: a\n    command: echo hi\n"))
	p, err := Load(filepath.Join("sub", "p.yaml"), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "sub"); p.Dir != want {
		t.Errorf("Dir = %q, want %q", p.Dir, want)
	}
}

// TestLoadFiles covers what is wrong with the file rather than its YAML.
func TestLoadFiles(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.yaml")
	if out, err := exec.Command("mkfifo", fifo).CombinedOutput(); err != nil {
		t.Fatalf("mkfifo: %v: %s", err, out)
	}
	big := filepath.Join(dir, "big.yaml")
	writeFile(t, big, nil)
	if err := os.Truncate(big, 10<<20+1); err != nil {
		t.Fatal(err)
	}
	exact := filepath.Join(dir, "exact.yaml")
	src := []byte("task_name: t\nsteps:\n  - id: a\n    command: echo hi\n#")
	writeFile(t, exact, append(src, bytes.Repeat([]byte("x"), 10<<20-len(src))...))
	nul := filepath.Join(dir, "nul.yaml")
	writeFile(t, nul, []byte("task_name: t\nsteps:\n  - id: a\n    command: echo \x00hi\n"))
	badUTF8 := filepath.Join(dir, "latin1.yaml")
	writeFile(t, badUTF8, []byte("task_name: t\nsteps:\n  - id: a\n    command: echo caf\xe9\n"))
	missing := filepath.Join(dir, "missing.yaml")

	tests := []struct {
		path string
		want string
	}{
		{dir, dir + ": is a directory; give the path of a pipeline YAML file"},
		{fifo, fifo + ": is not a regular file (a named pipe); give the path of a pipeline YAML file"},
		{big, big + ": is 10485761 bytes; a pipeline file may be at most 10 MiB"},
		{nul, nul + ":4: contains a NUL byte; a pipeline file must be UTF-8 text"},
		{badUTF8, badUTF8 + ":4: is not valid UTF-8; save the file as UTF-8"},
		{missing, missing + ": no such file; check the path"},
	}
	for _, tt := range tests {
		done := make(chan struct{})
		var err error
		go func() {
			defer close(done)
			_, err = Load(tt.path, LoadOptions{})
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("Load(%q) blocked", tt.path)
		}
		if err == nil || err.Error() != tt.want {
			t.Errorf("Load(%q) error = %v, want %q", tt.path, err, tt.want)
			continue
		}
		checkPipelineErrors(t, err, tt.path)
	}
	if _, err := Load(missing, LoadOptions{}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("errors.Is(Load(missing), fs.ErrNotExist) = false for %v", err)
	}
	if _, err := Load(exact, LoadOptions{}); err != nil {
		t.Errorf("Load(a file of exactly 10 MiB) error: %v", err)
	}
}

// TestLoadEncodings checks that a UTF-8 BOM and CRLF line endings just work.
func TestLoadEncodings(t *testing.T) {
	good := "task_name: t\nvars: {x: \"1\"}\nsteps:\n  - id: a\n    command: |\n      echo {{x}}\n      echo two\n  - id: b\n    command: x\n"
	bad := good + "    comand: y\n"
	crlf := func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }
	for name, enc := range map[string]func(string) string{
		"bom":      func(s string) string { return "\ufeff" + s },
		"crlf":     crlf,
		"bom+crlf": func(s string) string { return "\ufeff" + crlf(s) },
	} {
		t.Run(name, func(t *testing.T) {
			_, path, err := loadString(t, enc(bad), LoadOptions{})
			if want := path + `:10: step "b": unknown key "comand" (did you mean "command"?)`; err == nil || err.Error() != want {
				t.Errorf("Load() error = %v, want %q", err, want)
			}
			good := enc(good)
			p, _, err := loadString(t, good, LoadOptions{})
			if err != nil {
				t.Fatalf("Load() error: %v", err)
			}
			if got, want := p.Steps[0].Command, "echo {{x}}\necho two\n"; got != want {
				t.Errorf("command = %q, want %q", got, want)
			}
			if got, want := p.Steps[1].Line, 8; got != want {
				t.Errorf("step b line = %d, want %d", got, want)
			}
			if !bytes.Equal(p.Source, []byte(good)) {
				t.Errorf("Source is not the file's bytes")
			}
		})
	}
}

// TestLoadVarsOption checks that --var names are known variables and that
// Pipeline.Vars holds the file's vars only.
func TestLoadVarsOption(t *testing.T) {
	src := "task_name: t\nvars: {a: \"1\"}\nsteps:\n  - id: s\n    command: echo {{a}} {{b}}\n"
	_, path, err := loadString(t, src, LoadOptions{})
	if want := path + `:5: step "s": command: unknown template variable {{b}}; define it under vars: or pass --var b=VALUE`; err == nil || err.Error() != want {
		t.Errorf("Load() error = %v, want %q", err, want)
	}
	p, _, err := loadString(t, src, LoadOptions{Vars: map[string]string{"b": "2", "a": "3"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := p.Vars, map[string]string{"a": "1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Vars = %v, want %v", got, want)
	}
}

func TestLoadSuggestions(t *testing.T) {
	keys := append(append([]string{}, stepKeys...), topKeys...)
	tests := []struct {
		word string
		want string
	}{
		{"comand", "command"},
		{"depend_on", "depends_on"},
		{"dpeends_on", "depends_on"},
		{"Command", "command"},
		{"timout_seconds", "timeout_seconds"},
		{"retry_polcy", "retry_policy"},
		{"cleanup", "cleanup_command"},
		{"xyz", ""},
		{"", ""},
		{"parallelism", ""}, // itself is not a suggestion
	}
	for _, tt := range tests {
		if got := Suggest(tt.word, keys); got != tt.want {
			t.Errorf("Suggest(%q) = %q, want %q", tt.word, got, tt.want)
		}
	}
	if got := Suggest("fech", []string{"fetch", "load"}); got != "fetch" {
		t.Errorf("Suggest(fech) = %q, want fetch", got)
	}
	if got := Suggest("expo", []string{"none", "fixed", "exponential"}); got != "exponential" {
		t.Errorf("Suggest(expo) = %q, want exponential", got)
	}
}

// TestLoadRefs checks CheckRefs: what steps name outside the file is looked
// for as the Lua executor will look for it, and each problem names the
// line, the step and what to do. The workspace holds the pipeline in
// "proj"; "outside" is a folder beyond the workspace.
func TestLoadRefs(t *testing.T) {
	bundled := fstest.MapFS{
		"publish.lua":      {Data: []byte("return {run = function() end}")},
		"kit/init.lua":     {Data: []byte("return {run = function() end}")},
		"notify_hook.lua":  {Data: []byte("return {run = function() end}")},
		"types/apollo.lua": {Data: []byte("-- not a module folder")},
	}
	tests := []struct {
		name    string
		src     string
		setup   func(t *testing.T, ws, proj, outside string)
		bundled fs.FS
		want    []string // error lines, without the pipeline's path; none: valid
	}{
		{
			name: "all found",
			src: `task_name: t
modules: [lib, more]
steps:
  - {id: a, script: steps/a.lua, cleanup_script: steps/a.lua}
  - {id: b, script: ./steps/../steps/a.lua}
  - {id: c, uses: helper}
  - {id: d, uses: pkg}
  - {id: e, uses: pkg.sub}
  - {id: f, uses: publish}
  - {id: g, uses: kit}
  - {id: h, uses: second}
`,
			setup: func(t *testing.T, ws, proj, outside string) {
				for _, f := range []string{"steps/a.lua", "lib/helper.lua", "lib/pkg/init.lua", "lib/pkg/sub.lua", "more/second.lua"} {
					writeFile(t, filepath.Join(proj, f), []byte("return {run = function() end}"))
				}
			},
			bundled: bundled,
		},
		{
			name: "Lua that does not compile, inline and in a file",
			src: `task_name: t
steps:
  - id: a
    lua: |
      local x = 1
      return x +
  - id: b
    lua: "return )"
  - id: c
    script: steps/bad.lua
    cleanup_lua: |
      print("fine")
  - id: d
    lua: "return 1"
    cleanup_lua: "local s = 'unfinished\nreturn s"
  - id: e
    lua: |
      return 1
`,
			setup: func(t *testing.T, ws, proj, outside string) {
				writeFile(t, filepath.Join(proj, "steps", "bad.lua"), []byte("local t = {\nfunction end\n"))
			},
			want: []string{
				`:6: step "a": lua does not compile: syntax error near <eof>`,
				`:8: step "b": lua does not compile: syntax error near ')'`,
				`:10: step "c": script "steps/bad.lua" does not compile: proj/steps/bad.lua:2: syntax error near 'end'`,
				`:15: step "d": cleanup_lua does not compile: line 2 of the body: unterminated string near 'unfinished'`,
			},
		},
		{
			name: "a plain-scalar body cut by a YAML comment",
			src: `task_name: t
steps:
  - id: a
    lua: return #ctx.vars
  - id: b
    lua: local n = #ctx.vars; return n
  - id: c
    lua: return 1  # a real comment
  - id: d
    lua: "return '# quoted'"
    cleanup_lua: return #ctx.vars
`,
			want: []string{
				`:4: step "a": lua was cut by a YAML comment: the Lua read is "return", without "#ctx.vars"` + cutHint,
				`:6: step "b": lua does not compile: syntax error near <eof>; a YAML comment cut the body before "#ctx.vars; return n"` + cutHint,
				`:11: step "d": cleanup_lua was cut by a YAML comment: the Lua read is "return", without "#ctx.vars"` + cutHint,
			},
		},
		{
			name: "a script linked elsewhere in the workspace is read through it",
			src:  "task_name: t\nsteps:\n  - {id: a, script: linked.lua}\n",
			setup: func(t *testing.T, ws, proj, outside string) {
				writeFile(t, filepath.Join(ws, "shared", "real.lua"), []byte("return 1"))
				symlink(t, filepath.Join("..", "shared", "real.lua"), filepath.Join(proj, "linked.lua"))
			},
		},
		{
			name: "a script linked out of the workspace",
			src:  "task_name: t\nsteps:\n  - {id: a, script: linked.lua}\n",
			setup: func(t *testing.T, ws, proj, outside string) {
				writeFile(t, filepath.Join(outside, "real.lua"), []byte("return 1"))
				symlink(t, filepath.Join(outside, "real.lua"), filepath.Join(proj, "linked.lua"))
			},
			want: []string{`:3: step "a": script "linked.lua" leads out of the workspace through a symbolic link; Lua steps read files inside it only`},
		},
		{
			name: "a script that is a named pipe",
			src:  "task_name: t\nsteps:\n  - id: a\n    script: fifo.lua\n",
			setup: func(t *testing.T, ws, proj, outside string) {
				if out, err := exec.Command("mkfifo", filepath.Join(proj, "fifo.lua")).CombinedOutput(); err != nil {
					t.Fatalf("mkfifo: %v: %s", err, out)
				}
			},
			want: []string{`:4: step "a": script "fifo.lua" is not a regular file (a named pipe); name a .lua file`},
		},
		{
			name: "a missing script named by many steps, and its hint",
			src:  "task_name: t\nsteps:\n  - {id: a, script: steps/laod.lua}\n  - {id: b, script: steps/laod.lua}\n  - {id: c, script: steps/zzz.lua}\n",
			setup: func(t *testing.T, ws, proj, outside string) {
				writeFile(t, filepath.Join(proj, "steps", "load.lua"), []byte("return 1"))
			},
			want: []string{
				`:3: step "a": script "steps/laod.lua" does not exist (did you mean "steps/load.lua"?)`,
				`:4: step "b": script "steps/laod.lua" does not exist (did you mean "steps/load.lua"?)`,
				`:5: step "c": script "steps/zzz.lua" does not exist (it is relative to the pipeline's folder); create it or fix the path`,
			},
		},
		{
			name: "module problems",
			src: `task_name: t
modules: [lib, gone]
steps:
  - {id: a, uses: publsh}
  - {id: b, uses: kti}
  - {id: c, uses: apollo.idem}
  - {id: d, uses: escape}
  - {id: e, uses: folder}
  - {id: f, uses: unheard_of}
`,
			setup: func(t *testing.T, ws, proj, outside string) {
				writeFile(t, filepath.Join(outside, "escape.lua"), []byte("return {}"))
				symlink(t, filepath.Join(outside, "escape.lua"), filepath.Join(proj, "lib", "escape.lua"))
				writeFile(t, filepath.Join(proj, "lib", "folder.lua", "x"), nil)
			},
			bundled: bundled,
			want: []string{
				`:2: modules folder "gone" does not exist (it is relative to the pipeline's folder); create it or remove it from modules`,
				`:4: step "a": uses "publsh": no such module in lib or the bundled modules (did you mean "publish"?)`,
				`:5: step "b": uses "kti": no such module in lib or the bundled modules (did you mean "kit"?)`,
				`:6: step "c": uses "apollo.idem" names a library module, which a Lua body loads with require; uses takes a step module with run(ctx)`,
				`:7: step "d": uses "escape": lib/escape.lua cannot be loaded: it leads out of its folder through a symbolic link`,
				`:8: step "e": uses "folder": lib/folder.lua cannot be loaded: it is not a regular file`,
				`:9: step "f": uses "unheard_of": no such module in lib or the bundled modules; add lib/unheard_of.lua or fix the name`,
			},
		},
		{
			name: "working_dir",
			src: `task_name: t
working_dir: nowhere
steps:
  - {id: a, command: echo hi}
  - {id: b, command: echo hi, working_dir: pipeline.yaml}
  - {id: c, command: echo hi, working_dir: sub}
`,
			setup: func(t *testing.T, ws, proj, outside string) {
				writeFile(t, filepath.Join(proj, "sub", "x"), nil)
			},
			want: []string{
				`:2: working_dir "nowhere" does not exist (it is relative to the pipeline's folder, <proj>); create it or fix the path`,
				`:5: step "b": working_dir "pipeline.yaml" is not a folder`,
			},
		},
		{
			name: "capabilities used without allow",
			src: `task_name: t
modules: [lib]
defaults:
  allow: [http]
steps:
  - id: a
    lua: |
      local exec = require("apollo.exec")
      return exec.run({"true"})
    allow: []
  - id: b
    script: steps/b.lua
    allow: [exec]
  - id: c
    lua: return require("apollo.http").get("https://example.com").status
  - id: d
    uses: fetcher
    allow: [exec]
  - id: e
    uses: publish
  - id: f
    uses: publish
    allow: [{http: [hooks.example.com]}]
`,
			setup: func(t *testing.T, ws, proj, outside string) {
				writeFile(t, filepath.Join(proj, "steps/b.lua"), []byte("local http = require 'apollo.http'\nreturn http.get('https://example.com').status\n"))
				writeFile(t, filepath.Join(proj, "lib/fetcher.lua"), []byte("-- needs: http\nreturn {run = function() end}\n"))
			},
			bundled: fstest.MapFS{"publish.lua": {Data: []byte("-- needs: http, exec\nreturn {run = function() end}")}},
			want: []string{
				`:7: step "a": lua uses apollo.exec, which the step is not allowed; add allow: [exec] to it (or to defaults:)`,
				`:12: step "b": script "steps/b.lua" uses apollo.http, which the step is not allowed; add allow: [http] to it (or to defaults:)`,
				`:17: step "d": uses "fetcher" uses apollo.http, which the step is not allowed; add allow: [http] to it (or to defaults:)`,
				`:20: step "e": uses "publish" uses apollo.exec, which the step is not allowed; add allow: [exec] to it (or to defaults:)`,
				`:22: step "f": uses "publish" uses apollo.exec, which the step is not allowed; add allow: [exec] to it (or to defaults:)`,
			},
		},
		{
			// A module a step loads by uses or a literal require (and what it
			// requires in turn) must compile; a module no folder has, or a
			// library module, is left to run time.
			name: "modules that do not compile",
			src: `task_name: t
modules: [lib]
steps:
  - id: direct
    lua: return require("bad").x
  - id: through
    lua: |
      local ok = require 'good'
      return ok.y
  - id: used
    uses: broken
  - id: fine
    lua: |
      local json = require("apollo.json")
      local maybe = pcall(require, "optional")
      return require("good2").y
`,
			setup: func(t *testing.T, ws, proj, outside string) {
				writeFile(t, filepath.Join(proj, "lib/bad.lua"), []byte("local x = = 1\nreturn {x = x}\n"))
				writeFile(t, filepath.Join(proj, "lib/good.lua"), []byte("local inner = require(\"inner\")\nreturn {y = inner}\n"))
				writeFile(t, filepath.Join(proj, "lib/inner.lua"), []byte("return function(\n"))
				writeFile(t, filepath.Join(proj, "lib/broken.lua"), []byte("function run(ctx)\n  return 1 +\nend\n"))
				writeFile(t, filepath.Join(proj, "lib/good2.lua"), []byte("return {y = 2}\n"))
			},
			want: []string{
				`:5: step "direct": require("bad") does not compile: lib/bad.lua:1: syntax error near '='`,
				`:7: step "through": require("inner") does not compile: lib/inner.lua:1: syntax error near <eof>`,
				`:11: step "used": uses "broken" does not compile: lib/broken.lua:2: syntax error near 'end': the expression ends in '+' with nothing after it`,
			},
		},
		{
			name: "no modules folder and no bundled modules",
			src:  "task_name: t\nsteps:\n  - {id: a, uses: helper}\n",
			want: []string{`:3: step "a": uses "helper": no such module: the pipeline has no modules folder; add modules: [lib] and lib/helper.lua`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := t.TempDir()
			outside := t.TempDir()
			proj := filepath.Join(ws, "proj")
			path := filepath.Join(proj, "pipeline.yaml")
			writeFile(t, path, []byte(tt.src))
			if tt.setup != nil {
				tt.setup(t, ws, proj, outside)
			}
			// Without CheckRefs, nothing outside the file is looked at.
			if _, err := Load(path, LoadOptions{}); err != nil {
				t.Fatalf("Load() without CheckRefs: %v", err)
			}
			_, err := Load(path, LoadOptions{CheckRefs: true, Workdir: ws, Bundled: tt.bundled})
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Load() error: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Load() = nil error, want %q", tt.want)
			}
			checkPipelineErrors(t, err, path)
			var want []string
			for _, w := range tt.want {
				want = append(want, path+strings.ReplaceAll(w, "<proj>", proj))
			}
			if got := strings.Split(err.Error(), "\n"); !slices.Equal(got, want) {
				t.Errorf("Load() error =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// TestLoadRefsOutsideWorkspace: a pipeline kept outside the workspace
// reads its scripts through its own folder, as the Lua executor does.
func TestLoadRefsOutsideWorkspace(t *testing.T) {
	ws, proj := t.TempDir(), t.TempDir()
	path := filepath.Join(proj, "pipeline.yaml")
	writeFile(t, path, []byte("task_name: t\nsteps:\n  - {id: a, script: a.lua}\n"))
	writeFile(t, filepath.Join(proj, "a.lua"), []byte("return 1"))
	if _, err := Load(path, LoadOptions{CheckRefs: true, Workdir: ws}); err != nil {
		t.Fatalf("Load() error: %v", err)
	}
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
