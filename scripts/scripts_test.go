package scripts_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"apollo/engine"
	"apollo/eventlog"
	"apollo/luart"
	"apollo/scripts"
	"apollo/stdlib"
)

// run runs a pipeline in dir in-process with the bundled modules.
//
//lint:ignore ST1008 the error first, as the tests read it: err, state, output
func run(t *testing.T, dir, yaml string, ro engine.RunOptions) (error, *eventlog.State, string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "pipeline.yaml"), []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if ro.TaskID == "" {
		ro.TaskID = "t"
	}
	var out bytes.Buffer
	e := engine.New(engine.Options{StateDir: filepath.Join(dir, ".apollo"), Workdir: dir, Stdout: &out,
		Progress: engine.ProgressPlain, Bundled: scripts.Modules(), KillGrace: 200 * time.Millisecond})
	err := e.Run(t.Context(), filepath.Join(dir, "pipeline.yaml"), ro)
	logs, _ := filepath.Glob(filepath.Join(dir, ".apollo", "logs", "task_"+ro.TaskID+"_*.jsonl"))
	if len(logs) == 0 {
		t.Fatalf("no log; run: %v\n%s", err, out.String())
	}
	recs, _, rerr := eventlog.ReadAll(logs[len(logs)-1], eventlog.ReadOptions{TaskID: ro.TaskID})
	if rerr != nil {
		t.Fatal(rerr)
	}
	return err, eventlog.Replay(ro.TaskID, recs), out.String()
}

func output(t *testing.T, st *eventlog.State, step string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(st.Step(step).Output, &v); err != nil {
		t.Fatalf("output of %s: %v (%s)", step, err, st.Step(step).Output)
	}
	return v
}

func TestHTTPFetch(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path == "/missing" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		io.WriteString(w, "a,b\n1,2\n")
	}))
	defer srv.Close()
	sum := stdlib.Digest([]byte("a,b\n1,2\n"))
	dir := t.TempDir()
	yaml := `task_name: fetch
steps:
  - id: fetch
    uses: http_fetch
    allow: [http]
    with: {url: "` + srv.URL + `/data.csv", dest: "out/data.csv", sha256: "` + sum + `"}
`
	err, st, _ := run(t, dir, yaml, engine.RunOptions{TaskID: "f1"})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "out/data.csv"))
	if string(b) != "a,b\n1,2\n" {
		t.Errorf("data.csv = %q", b)
	}
	if got := output(t, st, "fetch"); got["downloaded"] != true || got["digest"] != sum {
		t.Errorf("output = %v", got)
	}
	// Same digest already in place: no download.
	err, st, _ = run(t, dir, yaml, engine.RunOptions{TaskID: "f2"})
	if err != nil || hits.Load() != 1 {
		t.Fatalf("second run: %v, %d requests, want 1", err, hits.Load())
	}
	if got := output(t, st, "fetch"); got["downloaded"] != false {
		t.Errorf("second output = %v, want downloaded false", got)
	}
	// A 404 fails the step and leaves no file.
	yaml404 := strings.Replace(yaml, "/data.csv\", dest: \"out/data.csv\", sha256: \""+sum+"\"", "/missing\", dest: \"out/missing.csv\"", 1)
	err, st, _ = run(t, dir, yaml404, engine.RunOptions{TaskID: "f3"})
	if err == nil || !strings.Contains(st.Step("fetch").LastError, "answered 404") {
		t.Errorf("404: Run = %v, error %q", err, st.Step("fetch").LastError)
	}
	if _, err := os.Stat(filepath.Join(dir, "out/missing.csv")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a failed download left a file")
	}
}

func TestNotifyWebhookPostsOncePerTask(t *testing.T) {
	var posts atomic.Int32
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		body, _ = io.ReadAll(r.Body)
	}))
	defer srv.Close()
	dir := t.TempDir()
	yaml := `task_name: notify
steps:
  - id: notify
    uses: notify_webhook
    allow: [http]
    with: {url: "` + srv.URL + `", message: "published"}
`
	if err, _, _ := run(t, dir, yaml, engine.RunOptions{TaskID: "n1"}); err != nil {
		t.Fatal(err)
	}
	// Rerunning the step (resume-from) returns the recorded result: no second POST.
	err, st, _ := run(t, dir, yaml, engine.RunOptions{TaskID: "n1", ResumeFrom: "notify"})
	if err != nil {
		t.Fatal(err)
	}
	if posts.Load() != 1 {
		t.Errorf("%d POSTs, want 1", posts.Load())
	}
	var msg map[string]string
	json.Unmarshal(body, &msg)
	if msg["message"] != "published" || msg["task_id"] != "n1" {
		t.Errorf("posted %s", body)
	}
	if got := output(t, st, "notify"); got["sent"] != true {
		t.Errorf("output = %v", got)
	}
	// No url: nothing sent, the step succeeds.
	if err, _, _ := run(t, dir, strings.Replace(yaml, srv.URL, "", 1), engine.RunOptions{TaskID: "n2"}); err != nil {
		t.Errorf("empty url: %v", err)
	}
}

func TestCSVCheckReportsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "good.csv"), []byte("date,city,amount\n2026-12-01,rome,1.5\n2026-12-01,paris,2\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "bad.csv"), []byte("date,city,amount\n2026-12-1,rome,1.5\n2026-12-01,paris\n2026-12-01,\"oslo, no\",abc\n"), 0o644)
	yaml := `task_name: csv
steps:
  - id: check
    uses: csv_check
    with: {path: FILE, header: [date, city, amount], types: {date: date, amount: number}}
`
	err, st, _ := run(t, dir, strings.Replace(yaml, "FILE", "good.csv", 1), engine.RunOptions{TaskID: "c1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := output(t, st, "check"); got["rows"] != float64(2) {
		t.Errorf("rows = %v, want 2", got["rows"])
	}
	err, st, _ = run(t, dir, strings.Replace(yaml, "FILE", "bad.csv", 1), engine.RunOptions{TaskID: "c2"})
	if err == nil {
		t.Fatal("bad.csv passed")
	}
	msg := st.Step("check").LastError
	for _, want := range []string{
		`bad.csv:2: column date: "2026-12-1" is not a date`,
		`bad.csv:3: 2 fields, the header has 3`,
		`bad.csv:4: column amount: "abc" is not a number`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("report %q lacks %q", msg, want)
		}
	}
}

func TestPublishIsAtomicAndIdempotent(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "report.csv"), []byte("x\n"), 0o644)
	yaml := `task_name: pub
steps:
  - id: publish
    uses: publish
    with: {src: report.csv, dest: public/report.csv}
`
	err, st, _ := run(t, dir, yaml, engine.RunOptions{TaskID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	if got := output(t, st, "publish"); got["copied"] != true {
		t.Errorf("first publish: %v", got)
	}
	err, st, _ = run(t, dir, yaml, engine.RunOptions{TaskID: "p2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := output(t, st, "publish"); got["copied"] != false {
		t.Errorf("second publish copied again: %v", got)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "public"))
	if len(entries) != 1 {
		t.Errorf("public/ holds %d entries, want only report.csv (no temporary files)", len(entries))
	}
}

// TestExamplesRun runs every example pipeline from a copy of the
// repository's scripts folder, as a newcomer would.
func TestExamplesRun(t *testing.T) {
	examples, _ := filepath.Glob("examples/*.yaml")
	if len(examples) < 2 {
		t.Fatalf("found %d example pipelines", len(examples))
	}
	for _, ex := range examples {
		t.Run(filepath.Base(ex), func(t *testing.T) {
			dir := t.TempDir()
			if err := os.CopyFS(filepath.Join(dir, "scripts"), os.DirFS(".")); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			e := engine.New(engine.Options{StateDir: filepath.Join(dir, ".apollo"), Workdir: dir, Stdout: &out,
				Progress: engine.ProgressQuiet, Bundled: scripts.Modules()})
			wd, _ := os.Getwd()
			os.Chdir(dir)
			defer os.Chdir(wd)
			if err := e.Run(t.Context(), filepath.Join("scripts", ex), engine.RunOptions{TaskID: "example"}); err != nil {
				t.Fatalf("%s: %v\n%s", ex, err, out.String())
			}
		})
	}
}

// TestModulesAreDocumented checks that every bundled module starts with its
// documentation and compiles.
func TestModulesAreDocumented(t *testing.T) {
	names, _ := fs.Glob(scripts.Modules(), "*.lua")
	if len(names) < 4 {
		t.Fatalf("%d bundled modules, want at least 4", len(names))
	}
	rt := luart.New(luart.Options{})
	for _, n := range names {
		src, _ := fs.ReadFile(scripts.Modules(), n)
		if !strings.HasPrefix(string(src), "--- "+strings.TrimSuffix(n, ".lua")+":") {
			t.Errorf("%s does not start with '--- %s: what it does'", n, strings.TrimSuffix(n, ".lua"))
		}
		if _, err := rt.Compile(n, string(src)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
}

// TestLuaTypesCoverStdlib checks the LuaLS annotations name every function
// the standard library provides, so editors never lag the library.
func TestLuaTypesCoverStdlib(t *testing.T) {
	types := string(scripts.LuaTypes())
	env := &nullEnv{dir: t.TempDir()}
	L := lua.NewState()
	defer L.Close()
	var missing []string
	for name, loader := range stdlib.Modules(env) {
		L.Push(L.NewFunction(loader))
		L.Call(0, 1)
		mod, ok := L.Get(-1).(*lua.LTable)
		L.Pop(1)
		if !ok {
			t.Fatalf("%s loads a %T", name, L.Get(-1))
		}
		short := strings.TrimPrefix(name, "apollo.")
		mod.ForEach(func(k, v lua.LValue) {
			if v.Type() != lua.LTFunction {
				return
			}
			decl := regexp.MustCompile(`(?m)^function ` + regexp.QuoteMeta(short+"."+k.String()) + `\(`)
			if !decl.MatchString(types) {
				missing = append(missing, short+"."+k.String())
			}
		})
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("scripts/types/apollo.lua lacks: %s", strings.Join(missing, ", "))
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Fatal(err)
	}
}

// nullEnv is a standard-library environment with nothing in it.
type nullEnv struct{ dir string }

func (e *nullEnv) TaskID() string                             { return "t" }
func (e *nullEnv) StepID() string                             { return "s" }
func (e *nullEnv) RetryCount() int                            { return 0 }
func (e *nullEnv) InputDigest() string                        { return "" }
func (e *nullEnv) Workspace() string                          { return e.dir }
func (e *nullEnv) StateDir() string                           { return e.dir }
func (e *nullEnv) Marker(string) (stdlib.Marker, bool)        { return stdlib.Marker{}, false }
func (e *nullEnv) RecordMarker(stdlib.Marker) error           { return nil }
func (e *nullEnv) Log() io.Writer                             { return io.Discard }
func (e *nullEnv) Steps() []stdlib.StepReport                 { return nil }
func (e *nullEnv) Markers() []stdlib.Marker                   { return nil }
func (e *nullEnv) Intervene(action, target, why string) error { return nil }

// TestLuaTypesCoverCtx checks the LuaLS annotations name every field of
// ctx (docs/spec.md §6.5) an attempt may see.
func TestLuaTypesCoverCtx(t *testing.T) {
	types := string(scripts.LuaTypes())
	for _, f := range []string{"task_id", "step_id", "retry_count", "input_digest", "vars", "params",
		"artifacts_dir", "outputs", "failed", "item", "traceparent"} {
		if !regexp.MustCompile(`(?m)^---@field ` + f + `\??\s`).MatchString(types) {
			t.Errorf("scripts/types/apollo.lua: apollo.Ctx lacks the field %s", f)
		}
	}
}
