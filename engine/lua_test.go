package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			// Bombs get time enough for the memory bound to act first,
			// however loaded the machine is.
			timeout := "1"
			if tt.want == "memory" {
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
		{"deep recursion", `local function f(n) return 1 + f(n + 1) end return f(1)`, "overflow"},
		{"__index loop", `local t = setmetatable({}, {}); getmetatable(t).__index = t; return t.missing`, "pipeline.yaml[hostile]:1: too many recursions"},
		{"__index recursion", `local t = setmetatable({}, {__index = function(t, k) return t[k] end}); return t.missing`, "overflow"},
		{"__tostring recursion", `local t; t = setmetatable({}, {__tostring = function(s) return "a" .. tostring(s) end}); return tostring(t)`, "overflow"},
		{"error with a huge message", `error(string.rep("x", 1e7))`, "xxxxxxxx"},
		{"select far out of range", `return select(-1e8, 1, 2, 3)`, "pipeline.yaml[hostile]:1: bad argument #1 to select"},
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
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
				t.Fatal(err)
			}
			// Only the endless ones wait for their timeout; the memory
			// bound must act first, however loaded the machine.
			timeout := "10"
			switch tt.want {
			case "timed out":
				timeout = "1"
			case "memory":
				timeout = "60"
			}
			yaml := "task_name: hostile\nsteps:\n  - id: hostile\n    optional: true\n    timeout_seconds: " + timeout +
				"\n    memory_mb: 64\n    lua: |\n      " + tt.body + "\n" +
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
