package luart

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
)

// Every state gets fresh library tables (a script may change string or math, and only its own
// state may see that), but the functions in them are gopher-lua's own Go functions, taken once
// per process from its libraries and shared by every state. Building the tables from this list
// costs a fraction of opening the libraries in each state (which registers every function
// through the VM, then has the sandbox delete a third of them again).
//
// Sharing a function value is safe because nothing a script can reach changes one: a Go
// function's only mutable parts are its environment (setfenv, getfenv and debug are never
// exposed) and its upvalues (only debug.setupvalue writes them). Tables are never shared.

// libEntry is one field of a library table.
type libEntry struct {
	key   string
	value lua.LValue // a Go function, a number or a string: never a table
}

// stdLibs are the allowed contents of the libraries a state opens.
type stdLibs struct {
	base      []libEntry // globals from the base library, without _G, the removed ones and pcall, xpcall
	str       []libEntry // string, without dump and the functions builtins.go replaces
	table     []libEntry // table, without concat
	math      []libEntry
	coroutine []libEntry // coroutine, without create, resume, wrap and yield
	// strFormat is gopher-lua's string.format, which the sandbox's wraps.
	strFormat lua.LGFunction
	// coCreate, coResume and coWrap are gopher-lua's coroutine.create, resume and wrap, which
	// the sandbox's call after checking the nesting depth or giving a Go function a Lua
	// bottom frame (protect.go).
	coCreate, coResume, coWrap lua.LGFunction
	// coYield is gopher-lua's coroutine.yield; the sandbox's is a Lua function calling it
	// (protect.go). pack and unpack serve that Lua function.
	coYield, pack, unpack *lua.LFunction
	// The __index functions of _G, string and package (see unavailable).
	globalsIndex, stringIndex, packageIndex *lua.LFunction
	// tonumber is apollo's (toNumber), in place of gopher-lua's, which reads "1e3" as nil.
	tonumber *lua.LFunction
}

// sharedLibs returns the library contents, built on first use.
var sharedLibs = sync.OnceValue(loadLibs)

// replacedStr are the string functions builtins.go replaces with its own, plus dump.
var replacedStr = []string{"dump", "rep", "find", "match", "gmatch", "gfind", "gsub", "format", "__index"}

// loadLibs opens gopher-lua's libraries in a throwaway state and keeps what the sandbox
// allows. It panics if a library holds a value that cannot be shared, which would be a
// gopher-lua upgrade for the sandbox to review.
func loadLibs() *stdLibs {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	libs := []struct {
		name string
		fn   lua.LGFunction
	}{
		{lua.BaseLibName, lua.OpenBase},
		{lua.TabLibName, lua.OpenTable},
		{lua.StringLibName, lua.OpenString},
		{lua.MathLibName, lua.OpenMath},
		{lua.CoroutineLibName, lua.OpenCoroutine},
	}
	for _, lib := range libs {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	libTable := func(name string) *lua.LTable {
		t, ok := L.GetGlobal(name).(*lua.LTable)
		if !ok {
			panic(fmt.Sprintf("luart: gopher-lua opened no %s library", name))
		}
		return t
	}
	goFunction := func(t *lua.LTable, name string) lua.LGFunction {
		fn, ok := t.RawGetString(name).(*lua.LFunction)
		if !ok || !fn.IsG {
			panic(fmt.Sprintf("luart: gopher-lua's %s is not a Go function", name))
		}
		return fn.GFunction
	}
	str := libTable(lua.StringLibName)
	co := libTable(lua.CoroutineLibName)
	skipBase := slices.Concat(removedGlobals, []string{"_G", "print", "require", "pcall", "xpcall", "tonumber",
		lua.TabLibName, lua.StringLibName, lua.MathLibName, lua.CoroutineLibName})
	return &stdLibs{
		base:      entries(L.G.Global, "", skipBase),
		str:       entries(str, "string.", replacedStr),
		table:     entries(libTable(lua.TabLibName), "table.", []string{"concat"}),
		math:      entries(libTable(lua.MathLibName), "math.", nil),
		coroutine: entries(co, "coroutine.", []string{"create", "resume", "wrap", "yield"}),
		strFormat: goFunction(str, "format"),
		coCreate:  goFunction(co, "create"),
		coResume:  goFunction(co, "resume"),
		coWrap:    goFunction(co, "wrap"),
		coYield:   L.NewFunction(goFunction(co, "yield")),
		pack:      L.NewFunction(packResults),
		unpack:    L.NewFunction(goFunction(L.G.Global, "unpack")),

		globalsIndex: L.NewFunction(notAvailable("", unavailableGlobals)),
		stringIndex:  L.NewFunction(notAvailable("string.", unavailableString)),
		packageIndex: L.NewFunction(notAvailable("package.", unavailablePackage)),
		tonumber:     L.NewFunction(toNumber),
	}
}

// entries lists t's string-keyed fields but skip, sorted by key.
func entries(t *lua.LTable, prefix string, skip []string) []libEntry {
	var es []libEntry
	t.ForEach(func(k, v lua.LValue) {
		key, ok := k.(lua.LString)
		if !ok {
			panic(fmt.Sprintf("luart: library %s has a non-string key %v", strings.TrimSuffix(prefix, "."), k))
		}
		if slices.Contains(skip, string(key)) {
			return
		}
		switch v := v.(type) {
		case lua.LNumber, lua.LString:
		case *lua.LFunction:
			if !v.IsG {
				panic(fmt.Sprintf("luart: %s%s is a Lua function, which cannot be shared", prefix, key))
			}
		default:
			panic(fmt.Sprintf("luart: %s%s is a %s, which cannot be shared", prefix, key, v.Type()))
		}
		es = append(es, libEntry{key: string(key), value: v})
	})
	slices.SortFunc(es, func(a, b libEntry) int { return strings.Compare(a.key, b.key) })
	return es
}

// newLibTable makes a fresh table holding es, with room for extra more fields.
func newLibTable(L *lua.LState, es []libEntry, extra int) *lua.LTable {
	t := L.CreateTable(0, len(es)+extra)
	setEntries(t, es)
	return t
}

func setEntries(t *lua.LTable, es []libEntry) {
	for _, e := range es {
		t.RawSetString(e.key, e.value)
	}
}
