package engine

import (
	"bytes"
	"errors"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/eventlog"
)

// TestLuaSandboxEscapes runs hostile step bodies through the real engine:
// each must fail its step cleanly (exit 1 semantics, a readable error, the
// runner alive), and nothing outside the workspace is read or written.
func TestLuaSandboxEscapes(t *testing.T) {
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.txt")
	if err := os.WriteFile(secret, []byte("top secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("LUA_PATH", outside+"/?.lua")
	if err := os.WriteFile(filepath.Join(outside, "evil.lua"), []byte(`return {pwned = true}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, body, want string
	}{
		{"io.open", `return io.open("` + secret + `"):read("*a")`, "io"},
		{"os.execute", `os.execute("touch pwned")`, "os"},
		{"os.exit", `os.exit(3)`, "os"},
		{"dofile", `dofile("` + secret + `")`, "dofile"},
		{"dofile stdin", `dofile()`, "dofile"},
		{"loadfile", `loadfile("` + secret + `")`, "loadfile"},
		{"load", `load("return 1")()`, "load"},
		{"loadstring", `loadstring("return 1")()`, "loadstring"},
		{"getfenv", `return getfenv(0)`, "getfenv"},
		{"setfenv", `setfenv(1, {})`, "setfenv"},
		{"collectgarbage", `collectgarbage()`, "collectgarbage"},
		{"module", `module("x")`, "module"},
		{"newproxy", `newproxy(true)`, "newproxy"},
		{"string.dump", `string.dump(function() end)`, "dump"},
		{"debug", `debug.getinfo(1)`, "debug"},
		{"require path", `require("../secret")`, "module"},
		{"require absolute", `require("` + strings.TrimSuffix(secret, ".txt") + `")`, "module"},
		{"require via package.path", `package.path = "` + outside + `/?.lua"; return require("evil").pwned`, "evil"},
		{"require via LUA_PATH", `return require("evil").pwned`, "evil"},
		{"fs absolute outside", `return require("apollo.fs").read("` + secret + `")`, "outside"},
		{"fs dotdot", `return require("apollo.fs").read("../../../../../../../../` + secret + `")`, "outside"},
		{"fs link out", `return require("apollo.fs").read("link/secret.txt")`, "outside"},
		{"idem.write outside", `require("apollo.idem").write("` + filepath.Join(outside, "w.txt") + `", "x")`, "outside"},
		{"endless loop", `while true do end`, "timed out"},
		{"endless loop in pcall", `pcall(function() while true do end end)`, "timed out"},
		{"endless loop in coroutine", `coroutine.wrap(function() while true do end end)()`, "timed out"},
		{"endless sort comparator", `local t = {3,2,1}; table.sort(t, function(a, b) while true do end end)`, "timed out"},
		{"string.rep bomb", `return #string.rep("x", 1e12)`, "memory"},
		{"concat bomb", `local s = "x"; while true do s = s .. s end`, "memory"},
		{"table bomb", `local t = {}; local i = 0; while true do i = i + 1; t[i] = {i, i, i} end`, "memory"},
		{"error object", `error({code = 7})`, "code"},
	}
	// Under -short, the bombs that take seconds to reach the memory bound
	// are left out (the string.rep bomb proves the bound), and so are the
	// endless bodies but one, each waiting out its timeout.
	slow := map[string]bool{"concat bomb": true, "table bomb": true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if testing.Short() && (slow[tt.name] || tt.want == "timed out" && tt.name != "endless loop in pcall") {
				t.Skip("-short: this body takes seconds to reach its bound; run without -short")
			}
			t.Parallel() // several wait out a timeout of their own
			dir := t.TempDir()
			if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			// Bombs get time enough for the memory bound to act first,
			// however loaded the machine is; the endless ones a short
			// timeout, which proves the bound as well as a long one.
			timeout := "10"
			switch tt.want {
			case "timed out":
				timeout = "0.3"
			case "memory":
				timeout = "30"
			}
			yaml := "task_name: sandbox\nsteps:\n  - id: hostile\n    timeout_seconds: " + timeout + "\n    memory_mb: 64\n    lua: |\n"
			for _, l := range strings.Split(tt.body, "\n") {
				yaml += "      " + l + "\n"
			}
			err, st, _ := runPipeline(t, dir, yaml, RunOptions{}, Options{})
			var tf *TaskFailedError
			if !errors.As(err, &tf) {
				t.Fatalf("Run = %v, want the step to fail", err)
			}
			s := st.Step("hostile")
			if s.Status != eventlog.Failed {
				t.Fatalf("step status %s, want FAILED", s.Status)
			}
			if !strings.Contains(strings.ToLower(s.LastError), tt.want) {
				t.Errorf("error %q does not mention %q", s.LastError, tt.want)
			}
			if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
				t.Errorf("the body escaped: pwned exists")
			}
			if _, err := os.Stat(filepath.Join(outside, "w.txt")); err == nil {
				t.Errorf("the body wrote outside the workspace")
			}
		})
	}
}

// TestLuaHostileScripts runs pathological and hostile step bodies through
// the real engine, each followed by a step that depends on it: the hostile
// step must end cleanly — FAILED with an error holding want, or, when want
// is "", SUCCESS doing no harm — the runner must go on to run the next step
// in a state the hostile one could not touch, and nothing outside the
// workspace may change.
func TestLuaHostileScripts(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.txt"), []byte("top secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, body, want string
	}{
		{"pattern a? chain", `return string.rep("a", 1e5):find(string.rep("a?", 40) .. string.rep("a", 40) .. "b")`, "timed out"},
		{"pattern .- chain", `return string.rep("a", 5e4):find(string.rep(".-", 30) .. "b")`, "timed out"},
		{"gmatch backtracking", `for m in string.rep("a", 1e4):gmatch(string.rep("a?", 20) .. string.rep("a", 20) .. "b") do end`, "timed out"},
		{"gsub backtracking", `return (string.rep("a", 2e4):gsub(string.rep("a-", 25) .. "b", "x"))`, "timed out"},
		{"gsub huge replacement", `return #(string.rep("a", 1e6):gsub("a", string.rep("b", 1000)))`, "memory"},
		{"rep of rep", `return #string.rep("x", 1e6):rep(1e3)`, "memory"},
		{"format huge width", `return #string.format("%099999d", 1)`, ""},
		{"xpcall handler loops", `xpcall(function() error("first") end, function() while true do end end)`, "timed out"},
		{"xpcall handler errors", `local ok = xpcall(function() error("first") end, function() error("second") end); assert(not ok)`, ""},
		{"pcall error loop", `while true do pcall(error, {}) end`, "timed out"},
		{"deep recursion", `local function f(n) return 1 + f(n + 1) end return f(1)`, "pipeline.yaml:9: stack overflow (more than 256 nested calls)"},
		{"endless tail call", `local function f() return f() end return f()`, "timed out"},
		{"endless tail call in pcall", `pcall(function() local function f() return f() end return f() end) while true do end`, "timed out"},
		{"endless tail call in a coroutine", `coroutine.wrap(function() local function f() return f() end return f() end)()`, "timed out"},
		{"endless tail call in idem.once", `require("apollo.idem").once("spin", function() local function f() return f() end return f() end)`, "timed out"},
		{"coroutines nested without end", `local function f(n) return coroutine.wrap(function() return f(n + 1) end)() end return f(1)`, "pipeline.yaml:9: coroutine nesting deeper than 200"},
		{"__index loop", `local t = setmetatable({}, {}); getmetatable(t).__index = t; return t.missing`, "pipeline.yaml:9: too many recursions"},
		{"__index recursion", `local t = setmetatable({}, {__index = function(t, k) return t[k] end}); return t.missing`, "overflow"},
		{"__tostring recursion", `local t; t = setmetatable({}, {__tostring = function(s) return "a" .. tostring(s) end}); return tostring(t)`, "overflow"},
		{"error with a huge message", `error(string.rep("x", 1e7))`, "xxxxxxxx"},
		{"select far out of range", `return select(-1e8, 1, 2, 3)`, "pipeline.yaml:9: bad argument #1 to select"},
		{"string.char with many arguments", `local t = {}; for i = 1, 2e5 do t[i] = 65 end; return #string.char(unpack(t))`, ""},
		{"string metatable changed", `getmetatable("").__index = function() return function() return "pwned" end end; assert(("x"):upper() == "pwned")`, ""},
		{"rawset smuggles a loader back", `rawset(_G, "loadstring", function() return function() return "mine" end end); assert(loadstring("x")() == "mine"); return os.getenv("HOME")`, "'os' is not available"},
		{"exec in a folder outside", `require("apollo.exec").run({"touch", "pwned"}, {dir = "` + outside + `"})`, "outside"},
		{"exec in a linked folder", `require("apollo.exec").run({"touch", "pwned"}, {dir = "link"})`, "outside"},
		{"fs through a link planted mid-step", `require("apollo.exec").run({"ln", "-s", "` + outside + `", "planted"}); require("apollo.fs").write("planted/pwned", "x")`, "outside"},
		{"idem.replace through a link", `require("apollo.idem").replace("link/pwned.jsonl", "k", {{a = 1}})`, "outside"},
		{"return nested too deep", `local t = {}; local c = t; for i = 1, 1000 do c.x = {}; c = c.x end; return t`, "levels deep"},
		{"coroutine bomb", `local t = {}; for i = 1, 1e8 do t[i] = coroutine.create(function() end) end`, "memory"},
	}
	// Under -short, the bodies that take seconds of work or memory are
	// left out ("rep of rep" proves the memory bound, "format huge width"
	// a big result), and so are the endless bodies but two, each waiting
	// out its timeout.
	slow := map[string]bool{"gsub huge replacement": true, "coroutine bomb": true,
		"error with a huge message": true, "string.char with many arguments": true}
	endless := map[string]bool{"gsub backtracking": true, "endless tail call in pcall": true}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if testing.Short() && (slow[tt.name] || tt.want == "timed out" && !endless[tt.name]) {
				t.Skip("-short: this body takes seconds of work, memory or waiting for its timeout; run without -short")
			}
			t.Parallel() // several wait out a timeout of their own
			dir := t.TempDir()
			if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			// Only the endless ones wait for their timeout; the memory
			// bound must act first, however loaded the machine.
			timeout := "10"
			switch tt.want {
			case "timed out":
				timeout = "0.3"
			case "memory":
				timeout = "60"
			}
			// A body that is not a memory bomb gets room under -race, whose
			// shadow memory counts against the Lua process's RLIMIT_DATA.
			memory := "64"
			if raceEnabled && tt.want != "memory" {
				memory = "512"
			}
			yaml := "task_name: hostile\nsteps:\n  - id: hostile\n    optional: true\n    timeout_seconds: " + timeout +
				"\n    memory_mb: " + memory + "\n    allow: [exec]\n    lua: |\n      " + tt.body + "\n" +
				"  - id: after\n    depends_on: [hostile]\n    lua: |\n" +
				"      assert(rawget(_G, \"os\") == nil and (\"x\"):upper() == \"X\")\n" +
				"      require(\"apollo.fs\").write(\"after.txt\", \"alive\")\n"
			err, st, _ := runPipeline(t, dir, yaml, RunOptions{}, Options{})
			if err != nil {
				t.Fatalf("Run = %v, want success (the hostile step is optional)", err)
			}
			if s := st.Step("after"); s.Status != eventlog.Success {
				t.Fatalf("the step after: %s %q, want SUCCESS", s.Status, s.LastError)
			}
			s := st.Step("hostile")
			switch {
			case tt.want == "" && s.Status != eventlog.Success:
				t.Errorf("hostile: %s %q, want SUCCESS", s.Status, s.LastError)
			case tt.want != "" && s.Status != eventlog.Failed:
				t.Errorf("hostile: %s, want FAILED with %q", s.Status, tt.want)
			case !strings.Contains(s.LastError, tt.want):
				t.Errorf("hostile: error %.300q does not hold %q", s.LastError, tt.want)
			case len(s.LastError) > 64<<10:
				t.Errorf("hostile: error is %d bytes; it must be cut short", len(s.LastError))
			}
			entries, err := os.ReadDir(outside)
			if err != nil || len(entries) != 1 {
				t.Errorf("the folder outside holds %v (%v), want only secret.txt", entries, err)
			}
			for _, name := range []string{"pwned", "planted/pwned"} {
				if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
					t.Errorf("the body's payload ran: %s exists", name)
				}
			}
		})
	}
}

var errStartFault = errors.New("injected STEP_START fault")

// startFaultFS fails the first write of the log holding a STEP_START ("write"), or the fsync
// after it ("sync"), as a full or failing disk would.
type startFaultFS struct {
	eventlog.OS
	op string

	mu           sync.Mutex
	armed, fired bool
}

type startFaultFile struct {
	*os.File
	fs *startFaultFS
}

func (s *startFaultFS) OpenFile(name string, flag int, perm os.FileMode) (eventlog.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &startFaultFile{File: f, fs: s}, nil
}

func (f *startFaultFile) Write(b []byte) (int, error) {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if !f.fs.armed && bytes.Contains(b, []byte(eventlog.StepStart)) {
		f.fs.armed = true
		if f.fs.op == "write" {
			f.fs.fired = true
			return 0, errStartFault
		}
	}
	return f.File.Write(b)
}

func (f *startFaultFile) Sync() error {
	f.fs.mu.Lock()
	defer f.fs.mu.Unlock()
	if f.fs.armed && !f.fs.fired && f.fs.op == "sync" {
		f.fs.fired = true
		return errStartFault
	}
	return f.File.Sync()
}

// TestLuaBodyWaitsForStepStart: a Lua body's effects wait for its durable STEP_START. The
// body may compute meanwhile, but print and apollo.* act only once the record is durable; when
// it cannot be written or fsynced, the run fails with the log error, nothing the body would
// have done is done (no file, no output line of an attempt the log does not know of), and a
// body that only computes, endlessly, is stopped rather than waited for. In a Lua process and
// in the runner alike.
func TestLuaBodyWaitsForStepStart(t *testing.T) {
	bodies := map[string]string{
		"write": `require("apollo.fs").write("ran.txt", "the body ran")
      return "ran"`,
		"print": `print("early words")
      require("apollo.fs").write("ran.txt", "the body ran")`,
		"endless": `local n = 0
      while true do n = n + 1 end`,
	}
	for _, isolation := range []string{"process", "inprocess"} {
		for name, body := range bodies {
			for _, op := range []string{"write", "sync"} {
				t.Run(isolation+"/"+name+"/"+op, func(t *testing.T) {
					yaml := `task_name: started
steps:
  - id: body
    isolation: ` + isolation + `
    timeout_seconds: 60
    lua: |
      ` + body + `
`
					dir := t.TempDir()
					fs := &startFaultFS{op: op}
					began := time.Now()
					err, st, _ := runPipeline(t, dir, yaml, RunOptions{}, Options{FS: fs})
					if took := time.Since(began); took > 30*time.Second {
						t.Errorf("the run took %s: a body whose start failed was waited for until its 60 s timeout", took)
					}
					if !fs.fired {
						t.Fatalf("no STEP_START %s was failed (Run: %v)", op, err)
					}
					if err == nil || !strings.Contains(err.Error(), errStartFault.Error()) {
						t.Errorf("Run = %v, want the injected %s error", err, op)
					}
					if _, serr := os.Stat(filepath.Join(dir, "ran.txt")); serr == nil {
						t.Errorf("the body wrote a file although its STEP_START %s failed", op)
					}
					filepath.WalkDir(filepath.Join(dir, ".apollo"), func(path string, d iofs.DirEntry, err error) error {
						if err == nil && !d.IsDir() {
							if b, _ := os.ReadFile(path); bytes.Contains(b, []byte("early words")) {
								t.Errorf("%s holds what the body printed although its STEP_START %s failed", path, op)
							}
						}
						return nil
					})
					if st != nil {
						if s := st.Step("body"); s.Status == eventlog.Success {
							t.Errorf("the step is recorded %s, want it not to have succeeded", s.Status)
						}
					}
				})
			}
		}
	}
}
