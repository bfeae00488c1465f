package luart

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// errSafety is the cause of the generous deadline every test state gets, so a broken limit
// fails a test instead of hanging it.
var errSafety = errors.New("test safety deadline")

func newState(t *testing.T, rt *Runtime, opts StateOptions) *State {
	t.Helper()
	ctx, cancel := context.WithTimeoutCause(t.Context(), 2*time.Minute, errSafety)
	t.Cleanup(cancel)
	s, err := rt.NewState(ctx, opts)
	if err != nil {
		t.Fatalf("NewState: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// writeFiles creates files under dir from a map of slash paths to contents.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGlobals(t *testing.T) {
	t.Parallel()
	s := newState(t, New(Options{}), StateOptions{})
	res, err := s.DoChunk("globals.lua", `
		local function keys(t) local ks = {} for k in pairs(t) do ks[#ks+1] = k end table.sort(ks) return table.concat(ks, " ") end
		return keys(_G), keys(string), keys(package), keys(package.loaded)`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"_G _GOPHER_LUA_VERSION _VERSION assert coroutine error getmetatable ipairs math next package pairs pcall print rawequal rawget rawset require select setmetatable string table tonumber tostring type unpack xpcall",
		"__index byte char find format gfind gmatch gsub len lower match rep reverse sub upper",
		"config cpath loaded loaders path",
		"_G coroutine math package string table",
	}
	for i, w := range want {
		if got := res[i].String(); got != w {
			t.Errorf("keys #%d = %q, want %q", i+1, got, w)
		}
	}
}

// TestSandbox tries every removed function and escape; each must be a clean Lua error with the
// script's position, and no evil code may run.
func TestSandbox(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"evil.lua": `EVIL = true return "evil"`, "secret.txt": "secret"})
	mods := t.TempDir()
	writeFiles(t, mods, map[string]string{"ok.lua": `return "ok"`})
	if err := os.Symlink(filepath.Join(outside, "evil.lua"), filepath.Join(mods, "escape.lua")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(mods, "linkdir")); err != nil {
		t.Fatal(err)
	}
	rt := New(Options{ModuleDirs: []string{mods}, Root: mods})
	evilPath := filepath.Join(outside, "evil.lua")
	secret := filepath.Join(outside, "secret.txt")

	tests := []struct {
		name, code, want string
	}{
		{"io.open", `return io.open(` + quote(secret) + `)`, "'io' is not available in the apollo sandbox"},
		{"io.popen", `return io.popen("id")`, "'io' is not available"},
		{"os.execute", `return os.execute("touch /tmp/x")`, "'os' is not available"},
		{"os.exit", `os.exit(1)`, "'os' is not available"},
		{"os.getenv", `return os.getenv("HOME")`, "'os' is not available"},
		{"debug.getinfo", `return debug.getinfo(1)`, "'debug' is not available"},
		{"debug.sethook", `debug.sethook()`, "'debug' is not available"},
		{"dofile", `return dofile(` + quote(evilPath) + `)`, "'dofile' is not available"},
		{"dofile no args (stdin)", `return dofile()`, "'dofile' is not available"},
		{"loadfile", `return loadfile(` + quote(evilPath) + `)`, "'loadfile' is not available"},
		{"loadfile no args (stdin)", `return loadfile()`, "'loadfile' is not available"},
		{"load", `return load(function() return nil end)`, "'load' is not available"},
		{"loadstring", `return loadstring("return 1")`, "'loadstring' is not available"},
		{"loadstring bytecode", `return loadstring("\27Lua")`, "'loadstring' is not available"},
		{"getfenv", `return getfenv(0)`, "'getfenv' is not available"},
		{"setfenv", `setfenv(1, {})`, "'setfenv' is not available"},
		{"collectgarbage", `collectgarbage()`, "'collectgarbage' is not available"},
		{"module", `module("x", package.seeall)`, "'module' is not available"},
		{"newproxy", `return newproxy(true)`, "'newproxy' is not available"},
		{"_printregs", `_printregs()`, "'_printregs' is not available"},
		{"string.dump", `return string.dump(print)`, "'string.dump' is not available"},
		{"string method dump", `return ("x"):dump()`, "'string.dump' is not available"},
		{"package.loadlib", `return package.loadlib("/lib/libc.so.6", "system")`, "'package.loadlib' is not available"},
		{"package.seeall", `package.seeall({})`, "'package.seeall' is not available"},
		{"channel", `return channel.make()`, "'channel' is not available"},
		{"require os", `return require("os")`, `require "os": module not found`},
		{"require io", `return require("io")`, `require "io": module not found`},
		{"require debug", `return require("debug")`, `require "debug": module not found`},
		{"require dotdot", `return require("../x")`, `require "../x": invalid module name`},
		{"require dotdot dots", `return require("..evil")`, `invalid module name`},
		{"require absolute", `return require("/etc/passwd")`, `require "/etc/passwd": invalid module name`},
		{"require slash", `return require("a/b")`, `require "a/b": invalid module name`},
		{"require empty", `return require("")`, `invalid module name`},
		{"require symlink out", `return require("escape")`, `require "escape": statat escape.lua: path escapes from parent`},
		{"require through linked dir", `return require("linkdir.evil")`, `require "linkdir.evil": statat linkdir/evil.lua: path escapes from parent`},
		{"package.path", `package.path = ` + quote(filepath.Join(outside, "?.lua")) + ` return require("evil")`, `require "evil": module not found`},
		{"package.loaders", `package.loaders[1] = nil package.loaders[2] = nil return require("evil")`, `require "evil": module not found`},
		{"package.preload", `return package.preload`, "'package.preload' is not available"},
		{"binary chunk", "\x1bLuaQ\x00", "binary (precompiled) chunks are not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, rt, StateOptions{})
			_, err := s.DoChunk("sandbox.lua", tt.code)
			var se *ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("error = %v (%T), want a *ScriptError", err, err)
			}
			if !strings.Contains(se.Msg, tt.want) {
				t.Errorf("error = %q, want it to contain %q", se.Msg, tt.want)
			}
			if tt.name != "binary chunk" && !strings.HasPrefix(se.Msg, "sandbox.lua:1: ") {
				t.Errorf("error = %q, want it to start with the position sandbox.lua:1:", se.Msg)
			}
			if got := s.L().GetGlobal("EVIL"); got != lua.LNil {
				t.Errorf("evil module ran: EVIL = %v", got)
			}
		})
	}
}

// TestLuaPathEnv: LUA_PATH in apollo's environment must not redirect require. (Not parallel:
// it sets an environment variable.)
func TestLuaPathEnv(t *testing.T) {
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"evil.lua": `EVIL = true return "evil"`})
	t.Setenv("LUA_PATH", filepath.Join(outside, "?.lua")+";;")
	t.Setenv("LUA_CPATH", filepath.Join(outside, "?.so"))
	s := newState(t, New(Options{ModuleDirs: []string{t.TempDir()}}), StateOptions{})
	_, err := s.DoChunk("env.lua", `return require("evil")`)
	var se *ScriptError
	if !errors.As(err, &se) || !strings.Contains(se.Msg, `require "evil": module not found`) {
		t.Fatalf("require with LUA_PATH set: %v, want module not found", err)
	}
	if got := s.L().GetGlobal("EVIL"); got != lua.LNil {
		t.Errorf("evil module ran: EVIL = %v", got)
	}
	if got := s.L().GetField(s.L().GetGlobal("package"), "path").String(); got != "" {
		t.Errorf("package.path = %q, want empty", got)
	}
}

// TestPackageLoadedSpoof: a script may overwrite package.loaded, but only in its own state.
func TestPackageLoadedSpoof(t *testing.T) {
	t.Parallel()
	rt := New(Options{})
	mods := map[string]lua.LGFunction{"apollo.x": func(L *lua.LState) int {
		L.Push(lua.LString("real"))
		return 1
	}}
	s1 := newState(t, rt, StateOptions{Modules: mods})
	res, err := s1.DoChunk("spoof.lua", `package.loaded["apollo.x"] = "fake" return require("apollo.x")`)
	if err != nil {
		t.Fatal(err)
	}
	if got := res[0].String(); got != "fake" {
		t.Errorf("spoofed require = %q, want %q (the script's own state)", got, "fake")
	}
	s2 := newState(t, rt, StateOptions{Modules: mods})
	got, err := s2.Require("apollo.x")
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != "real" {
		t.Errorf("require in a fresh state = %q, want %q", got, "real")
	}
}

func TestPrint(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := newState(t, New(Options{}), StateOptions{Print: &out})
	_, err := s.DoChunk("print.lua", `
		print("a", 1, nil, true)
		print()
		print(setmetatable({}, {__tostring = function() return "obj" end}))`)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "a\t1\tnil\ttrue\n\nobj\n"; got != want {
		t.Errorf("print output = %q, want %q", got, want)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	raise := map[string]lua.LGFunction{"apollo.fail": func(L *lua.LState) int {
		mod := L.NewTable()
		mod.RawSetString("now", L.NewFunction(func(L *lua.LState) int {
			L.RaiseError("fail.now %q: permission denied", L.CheckString(1))
			return 0
		}))
		L.Push(mod)
		return 1
	}}
	tests := []struct {
		name, chunk, code, want string
		value                   any
	}{
		{"runtime error", "scripts/load.lua", "local x = 1\nerror('boom')", "scripts/load.lua:2: boom", nil},
		{"inline chunk name", "pipeline.yaml:load", "\n\nerror('boom')", "pipeline.yaml:load:3: boom", nil},
		{"arithmetic on nil", "scripts/a.lua", "local t = nil\nreturn t.x", "scripts/a.lua:2: attempt to index", nil},
		{"assert", "scripts/a.lua", "assert(false, 'nope')", "scripts/a.lua:1: nope", nil},
		{"syntax error", "scripts/bad.lua", "local x = = 1", "scripts/bad.lua:1: syntax error near '='", nil},
		{"syntax error at eof", "scripts/bad.lua", "if true then\nlocal x = 1\n", "scripts/bad.lua:3: ", nil},
		{"go helper error", "scripts/a.lua", "local f = require('apollo.fail')\n\nf.now('/x')", `scripts/a.lua:3: fail.now "/x": permission denied`, nil},
		{"go helper bad argument", "scripts/a.lua", "local f = require('apollo.fail')\nf.now()", "scripts/a.lua:2: bad argument #1 to now (string expected, got nil)", nil},
		{"table error", "scripts/a.lua", "error({code = 'EACCES', n = 3})", `{"code":"EACCES","n":3}`, map[string]any{"code": "EACCES", "n": float64(3)}},
		{"table error with tostring", "scripts/a.lua", "error(setmetatable({}, {__tostring = function() return 'custom' end}))", "custom", []any{}},
		{"looping tostring", "scripts/a.lua", "error(setmetatable({}, {__tostring = function() while true do end end}))", "(error object is a table value)", []any{}},
		{"tail-calling tostring", "scripts/a.lua", "local function f() return f() end error(setmetatable({}, {__tostring = f}))", "(error object is a table value)", []any{}},
		{"error(nil)", "scripts/a.lua", "error(nil)", "nil", nil},
		{"error(number)", "scripts/a.lua", "error(42)", "42", float64(42)},
		{"stack overflow", "scripts/a.lua", "local function f() return 1 + f() end return f()", "overflow", nil},
	}
	rt := New(Options{ToStringBudget: 50 * time.Millisecond}) // the looping __tostring ones burn a core for it
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newState(t, rt, StateOptions{Modules: raise})
			_, err := s.DoChunk(tt.chunk, tt.code)
			var se *ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("error = %v (%T), want a *ScriptError", err, err)
			}
			if !strings.Contains(se.Msg, tt.want) {
				t.Errorf("message = %q, want it to contain %q", se.Msg, tt.want)
			}
			if !equalJSON(t, se.Value, tt.value) {
				t.Errorf("value = %#v, want %#v", se.Value, tt.value)
			}
			// The state stays usable after a Lua error.
			if res, err := s.DoChunk("after.lua", "return 1 + 1"); err != nil || res[0] != lua.LNumber(2) {
				t.Errorf("after the error: %v, %v", res, err)
			}
		})
	}
	t.Run("traceback", func(t *testing.T) {
		s := newState(t, rt, StateOptions{})
		_, err := s.DoChunk("scripts/deep.lua", "local function inner() error('x') end\nlocal function outer() inner() end\nouter()")
		var se *ScriptError
		if !errors.As(err, &se) {
			t.Fatalf("error = %v, want a *ScriptError", err)
		}
		for _, want := range []string{"stack traceback:", "scripts/deep.lua:1:", "scripts/deep.lua:3:"} {
			if !strings.Contains(se.Traceback, want) {
				t.Errorf("traceback %q does not contain %q", se.Traceback, want)
			}
		}
	})
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	ja, err1 := EncodeJSON(a)
	jb, err2 := EncodeJSON(b)
	return err1 == nil && err2 == nil && bytes.Equal(ja, jb)
}

func TestDoFile(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	writeFiles(t, root, map[string]string{
		"scripts/load.lua": "local x = ...\nerror('boom')",
		"scripts/ok.lua":   "return 'ok'",
	})
	writeFiles(t, outside, map[string]string{"evil.lua": "return 'evil'"})
	if err := os.Symlink(filepath.Join(outside, "evil.lua"), filepath.Join(root, "scripts", "link.lua")); err != nil {
		t.Fatal(err)
	}
	rt := New(Options{Root: root})

	s := newState(t, rt, StateOptions{})
	if _, err := s.DoFile("scripts/load.lua"); err == nil || err.Error() != "scripts/load.lua:2: boom" {
		t.Errorf("DoFile(relative) error = %v, want %q", err, "scripts/load.lua:2: boom")
	}
	res, err := s.DoFile(filepath.Join(root, "scripts", "ok.lua"))
	if err != nil || len(res) != 1 || res[0].String() != "ok" {
		t.Errorf("DoFile(absolute inside) = %v, %v, want ok", res, err)
	}
	for _, p := range []string{"../" + filepath.Base(outside) + "/evil.lua", filepath.Join(outside, "evil.lua"), "scripts/link.lua", "scripts/missing.lua", "/etc/passwd"} {
		if res, err := s.DoFile(p); err == nil {
			t.Errorf("DoFile(%q) = %v, want an error", p, res)
		}
	}
}

func TestModules(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	lib := filepath.Join(root, "lib")
	lib2 := filepath.Join(root, "lib2")
	writeFiles(t, root, map[string]string{
		"lib/deploy/helpers.lua": "local M = {} function M.hello(n) return 'hello ' .. n end return M",
		"lib/deploy/init.lua":    "return {name = 'deploy'}",
		"lib/first.lua":          "return 'lib'",
		"lib/counter.lua":        "COUNT = (COUNT or 0) + 1 return {}",
		"lib/noreturn.lua":       "X = 1",
		"lib/selfset.lua":        "package.loaded.selfset = 'set by itself'",
		"lib/broken.lua":         "local x = 1\nerror('module boom')",
		"lib/syntax.lua":         "local = 1",
		"lib/loop_a.lua":         "return require('loop_b')",
		"lib/loop_b.lua":         "return require('loop_a')",
		"lib/uses.lua":           "return {run = function(ctx) return ctx.n * 2 end, cleanup = function(ctx) return 'cleaned' end}",
		"lib/needsgo.lua":        "return require('apollo.idem').name",
		"lib2/first.lua":         "return 'lib2'",
		"lib2/only2.lua":         "return 'only in lib2'",
	})
	bundled := fstest.MapFS{
		"notify.lua":      {Data: []byte("return {channel = 'ops'}")},
		"first.lua":       {Data: []byte("return 'bundled'")},
		"pkg/init.lua":    {Data: []byte("return 'bundled init'")},
		"bad/module.lua":  {Data: []byte("\n\nerror('bundled boom')")},
		"apollo/idem.lua": {Data: []byte("return 'lua shadow'")},
	}
	goMods := map[string]lua.LGFunction{"apollo.idem": func(L *lua.LState) int {
		t := L.NewTable()
		t.RawSetString("name", lua.LString("go idem:"+L.CheckString(1)))
		L.Push(t)
		return 1
	}}
	rt := New(Options{ModuleDirs: []string{lib, lib2}, Bundled: bundled, Root: root})

	tests := []struct {
		name, code, want string
	}{
		{"dotted name", "return require('deploy.helpers').hello('world')", "hello world"},
		{"init.lua", "return require('deploy').name", "deploy"},
		{"first dir wins", "return require('first')", "lib"},
		{"second dir", "return require('only2')", "only in lib2"},
		{"bundled", "return require('notify').channel", "ops"},
		{"bundled init", "return require('pkg')", "bundled init"},
		{"go module first", "return require('apollo.idem').name", "go idem:apollo.idem"},
		{"module requires go module", "return require('needsgo')", "go idem:apollo.idem"},
		{"cached", "local a = require('counter') local b = require('counter') return tostring(a == b and COUNT == 1)", "true"},
		{"no return value", "return tostring(require('noreturn'))", "true"},
		{"module sets package.loaded", "return require('selfset')", "set by itself"},
		{"stdlib by name", "return tostring(require('string') == string)", "true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, rt, StateOptions{Modules: goMods})
			res, err := s.DoChunk("main.lua", tt.code)
			if err != nil {
				t.Fatal(err)
			}
			if got := res[0].String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}

	errTests := []struct {
		name, code, want string
	}{
		{"error in module", "return require('broken')", "lib/broken.lua:2: module boom"},
		{"syntax error in module", "return require('syntax')", "lib/syntax.lua:1: syntax error near '='"},
		{"error in bundled module", "return require('bad.module')", "scripts/bad/module.lua:3: bundled boom"},
		{"loop", "return require('loop_a')", `require "loop_a": loop`},
		{"not found", "return require('nothere')", `main.lua:1: require "nothere": module not found (searched the Go modules, lib, lib2, scripts (bundled))`},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, rt, StateOptions{Modules: goMods})
			_, err := s.DoChunk("main.lua", tt.code)
			var se *ScriptError
			if !errors.As(err, &se) || !strings.Contains(se.Msg, tt.want) {
				t.Errorf("error = %v, want a *ScriptError containing %q", err, tt.want)
			}
		})
	}

	t.Run("uses module", func(t *testing.T) {
		s := newState(t, rt, StateOptions{})
		mod, err := s.Require("uses")
		if err != nil {
			t.Fatal(err)
		}
		ctx := FromGo(s.L(), map[string]any{"n": 21})
		res, err := s.Call(s.L().GetField(mod, "run"), ctx)
		if err != nil || len(res) != 1 || res[0] != lua.LNumber(42) {
			t.Errorf("run(ctx) = %v, %v, want 42", res, err)
		}
		res, err = s.Call(s.L().GetField(mod, "cleanup"), ctx)
		if err != nil || len(res) != 1 || res[0].String() != "cleaned" {
			t.Errorf("cleanup(ctx) = %v, %v, want cleaned", res, err)
		}
		if _, err := s.Require("../uses"); err == nil {
			t.Error(`Require("../uses") succeeded, want an error`)
		}
	})

	t.Run("preload and invalid names", func(t *testing.T) {
		s := newState(t, rt, StateOptions{})
		if err := s.Preload("late.mod", func(L *lua.LState) int { L.Push(lua.LString("late")); return 1 }); err != nil {
			t.Fatal(err)
		}
		if v, err := s.Require("late.mod"); err != nil || v.String() != "late" {
			t.Errorf("Require(late.mod) = %v, %v", v, err)
		}
		if err := s.Preload("a/b", nil); err == nil {
			t.Error("Preload(a/b) succeeded, want an error")
		}
		if _, err := rt.NewState(t.Context(), StateOptions{Modules: map[string]lua.LGFunction{"../x": nil}}); err == nil {
			t.Error("NewState with Go module ../x succeeded, want an error")
		}
	})
}

func TestCompileCache(t *testing.T) {
	t.Parallel()
	rt := New(Options{})
	p1, err := rt.Compile("a.lua", "return 1")
	if err != nil {
		t.Fatal(err)
	}
	p2, _ := rt.Compile("a.lua", "return 1")
	p3, _ := rt.Compile("b.lua", "return 1")
	p4, _ := rt.Compile("a.lua", "return 2")
	if p1 != p2 {
		t.Error("same name and source compiled twice")
	}
	if p1 == p3 || p1 == p4 {
		t.Error("different name or source shared a proto")
	}
}

// TestCompileCacheRenames: a source compiled under one name and run under another (steps with
// the same body) is not compiled again, and reports its own name in errors and tracebacks.
func TestCompileCacheRenames(t *testing.T) {
	t.Parallel()
	rt := New(Options{})
	const src = "local function inner()\n  error('boom')\nend\ninner()"
	for _, name := range []string{"pipeline.yaml[a]", "pipeline.yaml[b]"} {
		s := newState(t, rt, StateOptions{})
		_, err := s.DoChunk(name, src)
		var se *ScriptError
		if !errors.As(err, &se) {
			t.Fatalf("DoChunk(%q) error = %v, want a *ScriptError", name, err)
		}
		if want := name + ":2: boom"; se.Msg != want {
			t.Errorf("DoChunk(%q) message = %q, want %q", name, se.Msg, want)
		}
		if want := name + ":4: in main chunk"; !strings.Contains(se.Traceback, want) {
			t.Errorf("DoChunk(%q) traceback %q does not contain %q", name, se.Traceback, want)
		}
	}
	a, _ := rt.Compile("pipeline.yaml[a]", src)
	b, _ := rt.Compile("pipeline.yaml[b]", src)
	if a == b || a.SourceName != "pipeline.yaml[a]" || b.SourceName != "pipeline.yaml[b]" {
		t.Errorf("protos %q and %q, want one per name", a.SourceName, b.SourceName)
	}
	if len(a.FunctionPrototypes) != 1 || a.FunctionPrototypes[0] == b.FunctionPrototypes[0] ||
		b.FunctionPrototypes[0].SourceName != "pipeline.yaml[b]" {
		t.Errorf("the nested function of the renamed proto is not renamed")
	}
	if &a.Code[0] != &b.Code[0] {
		t.Errorf("the renamed proto does not share the compiled code")
	}
}

// TestStatesShareNoTables: library functions are shared between states, their tables are not:
// what a script changes in string, math, table, coroutine, _G, package or the string
// metatable stays in its state.
func TestStatesShareNoTables(t *testing.T) {
	t.Parallel()
	rt := New(Options{})
	s1 := newState(t, rt, StateOptions{})
	if _, err := s1.DoChunk("spoil.lua", `
		string.upper = function() return "spoiled" end
		string.extra, math.floor, table.insert, coroutine.wrap = 1, nil, nil, nil
		getmetatable("").__index.lower = function() return "spoiled" end
		setmetatable(_G, nil)
		pairs, package.path, package.loaded.string = nil, "/tmp/?.lua", nil
		getmetatable(package).__index = nil`); err != nil {
		t.Fatal(err)
	}
	s2 := newState(t, rt, StateOptions{})
	res, err := s2.DoChunk("fresh.lua", `
		local ok, err = pcall(function() return os end)
		local _, perr = pcall(function() return package.preload end)
		return ("a"):upper() .. ("B"):lower(), tostring(string.extra), math.floor(1.5), type(table.insert),
			type(coroutine.wrap), type(pairs), package.path, tostring(package.loaded.string == string),
			tostring(ok) .. " " .. err, perr`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Ab", "nil", "1", "function", "function", "function", "", "true",
		"false fresh.lua:2: 'os' is not available in the apollo sandbox",
		"fresh.lua:3: 'package.preload' is not available in the apollo sandbox"}
	for i, w := range want {
		if got := res[i].String(); got != w {
			t.Errorf("result %d = %q, want %q", i+1, got, w)
		}
	}
}

// TestParallelStates runs states at once that call the shared library functions (run it with
// -race): sharing them must not share anything a call changes.
func TestParallelStates(t *testing.T) {
	t.Parallel()
	rt := New(Options{})
	const code = `
		local n = 0
		for i, v in ipairs({1, 2, 3}) do n = n + v end
		for k, v in pairs({a = 1, b = 2}) do n = n + v end
		local co = coroutine.wrap(function(a) coroutine.yield(a + 1) end)
		n = n + co(1) + math.floor(2.5) + #string.upper("abc") + select("#", unpack({1, 2}))
		table.insert(_G, n)
		return tostring(n) .. ("x"):rep(2)`
	var wg sync.WaitGroup
	results := make([]string, 8)
	for i := range results {
		s := newState(t, rt, StateOptions{})
		wg.Go(func() {
			res, err := s.DoChunk("parallel.lua", code)
			if err != nil {
				results[i] = err.Error()
				return
			}
			results[i] = res[0].String()
		})
	}
	wg.Wait()
	for i, got := range results {
		if got != "18xx" {
			t.Errorf("state %d returned %q, want 18xx", i, got)
		}
	}
}

func TestValidModuleName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		want bool
	}{
		{"apollo.idem", true},
		{"deploy", true},
		{"a.b_c.D9", true},
		{"_", true},
		{strings.Repeat("a", 256), true},
		{strings.Repeat("a", 257), false},
		{"", false},
		{".", false},
		{".a", false},
		{"a.", false},
		{"a..b", false},
		{"../x", false},
		{"a/b", false},
		{"/etc/passwd", false},
		{"a-b", false},
		{"a b", false},
		{"é", false},
	}
	for _, tt := range tests {
		if got := ValidModuleName(tt.name); got != tt.want {
			t.Errorf("ValidModuleName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestClosedAndCancelled(t *testing.T) {
	t.Parallel()
	rt := New(Options{})
	s := newState(t, rt, StateOptions{})
	s.Close()
	s.Close()
	if _, err := s.DoChunk("x.lua", "return 1"); !errors.Is(err, ErrClosed) {
		t.Errorf("DoChunk after Close = %v, want ErrClosed", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := rt.NewState(ctx, StateOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("NewState(cancelled ctx) = %v, want context.Canceled", err)
	}
}

func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
}
