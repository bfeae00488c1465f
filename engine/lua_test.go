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
