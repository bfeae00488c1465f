package luart

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestIndexedExprs(t *testing.T) {
	tests := []struct {
		line, key string
		want      []string
	}{
		{"return ctx.outputs.fetch.rows", "rows", []string{"ctx.outputs.fetch"}},
		{"local n = ctx.outputs.fetch.rows + 1", "rows", []string{"ctx.outputs.fetch"}},
		{`return ctx.outputs["fetch"].rows`, "rows", []string{`ctx.outputs["fetch"]`}},
		{`return t["rows"]`, "rows", []string{"t"}},
		{`return t['rows'] .. "x.rows"`, "rows", []string{"t"}},
		{"return get(x, y).data", "data", []string{"get(x, y)"}},
		{"return (a or b).data", "data", []string{"(a or b)"}},
		{"x:close()", "close", []string{"x"}},
		{"return list[i].name", "name", []string{"list[i]"}},
		{"return list[i]", "3", []string{"list"}},
		{"return list[3]", "3", []string{"list"}},
		{"return a.rows + b.rows", "rows", []string{"a", "b"}},
		{"return a.rows + a.rows", "rows", []string{"a"}},
		{"if not cfg.db.host then end", "host", []string{"cfg.db"}},
		{"return 1.5 + x.y", "y", []string{"x"}},
		{"return a .. b.c", "c", []string{"b"}},
		{"return {[k] = v}", "k", nil},
		{"-- ctx.outputs.fetch.rows", "rows", nil},
		{"return x.rows -- y.rows", "rows", []string{"x"}},
		{`return [[a.rows]] .. z.rows`, "rows", []string{"z"}},
		{"return nothing", "rows", nil},
	}
	for _, tt := range tests {
		if got := indexedExprs(tt.line, tt.key); !slices.Equal(got, tt.want) {
			t.Errorf("indexedExprs(%q, %q) = %q, want %q", tt.line, tt.key, got, tt.want)
		}
	}
}

// TestExplainIndex checks that a runtime error indexing nil names the expression, in an
// inline chunk, a function called from elsewhere, and a module.
func TestExplainIndex(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"lib/helper.lua": "local M = {}\nfunction M.f(t)\n  return t.config.name\nend\nreturn M\n"})
	rt := New(Options{Root: dir, ModuleDirs: []string{dir + "/lib"}})
	tests := []struct {
		name, src, want string
	}{
		{"inline", "local ctx = {outputs = {}}\nreturn ctx.outputs.fetch.rows\n",
			"p.yaml:2: attempt to index nil value 'ctx.outputs.fetch' with key 'rows'"},
		{"module", "return require('helper').f({})\n",
			"lib/helper.lua:3: attempt to index nil value 't.config' with key 'name'"},
		{"not nil", "local n = 3\nreturn n.x\n", "p.yaml:2: attempt to index number value 'n' with key 'x'"},
		{"line not found", "local t = {}\nreturn t.a\n.b", "p.yaml:2: attempt to index nil value with key 'b'"},
		{"narrowed by the globals", "ctx = {outputs = {a = {}}}\nreturn ctx.outputs.a.rows + ctx.outputs.b.rows\n",
			"p.yaml:2: attempt to index nil value 'ctx.outputs.b' with key 'rows'"},
		{"not narrowed to none", "local a, b\nreturn a.rows + b.rows\n",
			"p.yaml:2: attempt to index nil value (one of 'a', 'b') with key 'rows'"},
		{"call", "helper = {}\nreturn helper.run(1)\n", "p.yaml:2: attempt to call a non-function value 'helper.run'"},
		{"call narrowed", "helper = {}\nprint(helper.run(1))\n", "p.yaml:2: attempt to call a non-function value 'helper.run'"},
		{"error() untouched", "error('attempt to index a non-table object(nil) with key \\'x\\'', 0)",
			"attempt to index a non-table object(nil) with key 'x'"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, rt, StateOptions{})
			_, err := s.DoChunk("p.yaml", tt.src)
			var se *ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("DoChunk = %v, want a *ScriptError", err)
			}
			if se.Msg != tt.want {
				t.Errorf("message = %q, want %q", se.Msg, tt.want)
			}
		})
	}
}

func TestCalledExprs(t *testing.T) {
	tests := []struct {
		line string
		want []string
	}{
		{"return helper.run(ctx)", []string{"helper.run"}},
		{"print(foo(x))", []string{"print", "foo"}},
		{"obj:close()", []string{"obj:close"}},
		{"local function f(x) return g(x) end", []string{"g"}},
		{"function M.f(x) end", nil},
		{"if (a) then return (b) end", nil},
		{`log("x(y)")`, []string{"log"}},
		{"return t[1](x)", []string{"t[1]"}},
	}
	for _, tt := range tests {
		if got := calledExprs(tt.line); !slices.Equal(got, tt.want) {
			t.Errorf("calledExprs(%q) = %q, want %q", tt.line, got, tt.want)
		}
	}
}

// TestCompileAt checks that a chunk numbered from a later line reports that line in runtime
// errors (in the chunk and in a function it defines), in syntax errors and in tracebacks, and
// that the nil expression is still read from its text.
func TestCompileAt(t *testing.T) {
	rt := New(Options{Root: t.TempDir()})
	tests := []struct {
		name, src, want string
	}{
		{"runtime", "local t = {}\nreturn t.a.b\n", "p.yaml:11: attempt to index nil value 't.a' with key 'b'"},
		{"in a function", "local function f()\n  error('boom')\nend\nf()\n", "p.yaml:11: boom"},
		{"syntax", "local x = 1\nreturn x +\n", "p.yaml:11: syntax error near <eof>"}, // the line of the "+"
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, rt, StateOptions{})
			proto, err := s.CompileAt("p.yaml", tt.src, 10)
			if err == nil {
				_, err = s.Call(s.L().NewFunctionFromProto(proto))
			}
			var se *ScriptError
			if !errors.As(err, &se) {
				t.Fatalf("err = %v, want a *ScriptError", err)
			}
			if se.Msg != tt.want {
				t.Errorf("message = %q, want %q", se.Msg, tt.want)
			}
			if tt.name == "in a function" && !strings.Contains(se.Traceback, "p.yaml:13: in main chunk") {
				t.Errorf("traceback = %q, want the main chunk at p.yaml:13", se.Traceback)
			}
		})
	}
	// The cached proto keeps its own lines for a state that compiles it from line 1.
	s := newState(t, rt, StateOptions{})
	if _, err := s.DoChunk("p.yaml", "local t = {}\nreturn t.a.b\n"); err == nil || !strings.HasPrefix(err.Error(), "p.yaml:2: ") {
		t.Errorf("DoChunk after CompileAt = %v, want the error at p.yaml:2", err)
	}
}

// FuzzExprs checks that reading the candidate expressions of any line never panics, and that
// each candidate is text of the line.
func FuzzExprs(f *testing.F) {
	for _, s := range []string{"return ctx.outputs.fetch.rows", `t["k"](x):m [[s]] -- c`, "a..b.c", "f((()", "x[[y]].z", "]].a", "'\\", "function a.b(c) d:e() end"} {
		f.Add(s, "rows")
	}
	f.Fuzz(func(t *testing.T, line, key string) {
		for _, e := range slices.Concat(indexedExprs(line, key), calledExprs(line)) {
			if e == "" || !strings.Contains(line, e) {
				t.Errorf("candidate %q of %q is not text of the line", e, line)
			}
		}
	})
}
