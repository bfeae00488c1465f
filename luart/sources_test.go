package luart

import (
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	lua "github.com/yuin/gopher-lua"
)

// TestGather: Gather reads a step's script file, its modules and what they
// require by a literal name, transitively, from the module folders and the
// bundled modules; Go modules and modules found nowhere are left out.
func TestGather(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"steps/main.lua":       `local h = require("helpers.text"); local m = require 'missing'; return h.up("x")`,
		"lib/helpers/text.lua": `local k = require("kit"); return {up = function(s) return k.up(s) end}`,
		"lib/unused.lua":       `return {}`,
		"lib/entry.lua":        `return {run = function() return require("apollo.json").encode({}) end}`,
	})
	bundled := fstest.MapFS{"kit/init.lua": {Data: []byte(`return {up = string.upper}`)}}
	rt := New(Options{Root: root, ModuleDirs: []string{filepath.Join(root, "lib")}, Bundled: bundled})
	isGo := func(name string) bool { return strings.HasPrefix(name, "apollo.") }
	got, err := rt.Gather([]string{"steps/main.lua"}, []string{"entry"}, []string{`require("unused")`}, isGo)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"file:steps/main.lua": "steps/main.lua",
		"module:helpers.text": "lib/helpers/text.lua",
		"module:kit":          "scripts/kit/init.lua",
		"module:entry":        "lib/entry.lua",
		"module:unused":       "lib/unused.lua",
	}
	if len(got) != len(want) {
		t.Errorf("Gather = %d sources %v, want %d", len(got), keys(got), len(want))
	}
	for k, chunk := range want {
		if got[k].Chunk != chunk || got[k].Text == "" {
			t.Errorf("Gather[%s] = %+v, want chunk %s with its text", k, got[k], chunk)
		}
	}
	if _, err := rt.Gather([]string{"steps/none.lua"}, nil, nil, isGo); err == nil {
		t.Error("Gather of a missing script file: no error")
	}
}

// TestPinnedSources: a state given Sources runs them, not the files as they
// are on disk now: an edit after Gather does not reach the run. The digest
// follows the content.
func TestPinnedSources(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"main.lua":    `return require("mod").v`,
		"lib/mod.lua": `return {v = "first"}`,
	})
	rt := New(Options{Root: root, ModuleDirs: []string{filepath.Join(root, "lib")}})
	pinned, err := rt.Gather([]string{"main.lua"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	before := pinned.Digest()
	writeFiles(t, root, map[string]string{"main.lua": `return "edited"`, "lib/mod.lua": `return {v = "second"}`})
	s := newState(t, rt, StateOptions{Sources: pinned})
	res, err := s.DoFile("main.lua")
	if err != nil || len(res) != 1 || res[0] != lua.LString("first") {
		t.Errorf("DoFile with pinned sources = %v, %v; want first", res, err)
	}
	fresh := newState(t, rt, StateOptions{})
	if res, err := fresh.DoFile("main.lua"); err != nil || res[0] != lua.LString("edited") {
		t.Errorf("DoFile without sources = %v, %v; want edited", res, err)
	}
	again, err := rt.Gather([]string{"main.lua"}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest() == before || before == "" {
		t.Errorf("digest %q after an edit, %q before: want them different", again.Digest(), before)
	}
	if (Sources{}).Digest() != "" {
		t.Error("the digest of no sources is not empty")
	}
}

func keys(ss Sources) []string {
	var out []string
	for k := range ss {
		out = append(out, k)
	}
	return out
}
