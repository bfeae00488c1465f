package luart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"

	lua "github.com/yuin/gopher-lua"
)

// DefaultMemoryLimitMB is a state's memory limit when StateOptions.MemoryLimitMB is not set.
const DefaultMemoryLimitMB = 256

// luaOptions are the VM sizes for every state. The registry (the value stack) starts small,
// because a fresh state is made for every step and most steps are short, and grows in big steps
// up to a ceiling, so unpack and string.byte of 100k values work without the quadratic growth
// of the default step (table.concat does not use it: see builtins.go). Each growth copies the
// whole stack in one Go call that a timeout cannot interrupt: with steps of 4096 slots, a
// million values took 3.5-4.5 s whatever the step's timeout; with 64Ki, under a second. Coroutines inherit the
// sizes, so a small start also keeps each coroutine small. MinimizeStackMemory allocates call
// frames as the calls nest.
var luaOptions = lua.Options{
	SkipOpenLibs:        true,
	CallStackSize:       256,
	RegistrySize:        256,
	RegistryMaxSize:     1 << 20,
	RegistryGrowStep:    1 << 16,
	MinimizeStackMemory: true,
}

// removedGlobals are base functions a script must not have: they read files or standard
// input, run code from strings, reach other environments, or stall the whole process.
var removedGlobals = []string{
	"dofile", "loadfile", "load", "loadstring", "collectgarbage", "module",
	"getfenv", "setfenv", "newproxy", "_printregs",
}

// The names reading which raises "not available", per table (see notAvailable).
var (
	unavailableGlobals = nameSet(removedGlobals, "io", "os", "debug", "channel")
	unavailableString  = nameSet(nil, "dump")
	unavailablePackage = nameSet(nil, "loadlib", "seeall", "preload", "searchers", "searchpath")
)

func nameSet(names []string, more ...string) map[string]bool {
	set := make(map[string]bool, len(names)+len(more))
	for _, n := range slices.Concat(names, more) {
		set[n] = true
	}
	return set
}

// notAvailable returns the __index function of a table whose names in set are removed: reading
// one raises "'prefix+name' is not available in the apollo sandbox", so a script reaching for
// os.execute or dofile learns why instead of reading "attempt to index a nil value". The names
// stay absent (rawget returns nil); other absent keys are nil as usual.
func notAvailable(prefix string, set map[string]bool) lua.LGFunction {
	return func(L *lua.LState) int {
		if k, ok := L.Get(2).(lua.LString); ok && set[string(k)] {
			L.RaiseError("'%s%s' is not available in the apollo sandbox", prefix, string(k))
		}
		L.Push(lua.LNil)
		return 1
	}
}

// unavailable gives t a fresh metatable whose __index is index, a shared notAvailable
// function.
func unavailable(L *lua.LState, t *lua.LTable, index *lua.LFunction) {
	mt := L.CreateTable(0, 1)
	mt.RawSetString("__index", index)
	t.Metatable = mt
}

// StateOptions configure one state (one step execution or cleanup).
type StateOptions struct {
	// Print receives what print() writes: arguments tab-separated, then a newline. Nil
	// discards it. Capping the output is the writer's job.
	Print io.Writer
	// MemoryLimitMB is the state's memory limit in MiB; 0 means DefaultMemoryLimitMB.
	// See the package documentation for what it bounds and how.
	MemoryLimitMB int
	// Modules are Go modules require finds first, by name ("apollo.idem"). A loader is called
	// with the module name and returns the module value, as a package.preload loader does.
	Modules map[string]lua.LGFunction
	// Unwatched keeps the state out of the heap watchdog, for a process that bounds its
	// memory itself (a child of engine/luaproc, which runs one state at a time under a limit
	// of its own). The builtins still check their results against MemoryLimitMB.
	Unwatched bool
	// Sources are files read before the state was made (Runtime.Gather):
	// DoFile and require run these texts instead of reading the files.
	Sources Sources
}

// State is one fresh sandboxed Lua state. It is not safe for concurrent use, and must be
// closed.
type State struct {
	rt       *Runtime
	ls       *lua.LState
	ctx      context.Context
	cancel   context.CancelCauseFunc
	print    io.Writer
	limit    int64                     // bytes
	sources  Sources                   // StateOptions.Sources
	modules  map[string]lua.LGFunction // StateOptions.Modules until Preload copies it
	ownMods  bool                      // modules is the state's own copy
	loaded   *lua.LTable               // package.loaded, as first installed
	loading  map[string]bool           // made by the first require
	require  *lua.LFunction
	quiet    *lua.LFunction         // the trampoline of pcall and xpcall (protect.go)
	overflow lua.LString            // the last call-stack overflow under quiet
	traced   *lua.LFunction         // the trampoline of Call, made by the first Call
	chunks   map[string]chunkSource // the source of each chunk compiled here, by name (explain.go)
	closed   bool
	watched  bool // registered with the heap watchdog

	// Kept by the heap watchdog.
	seq       uint64
	startHeap uint64
	killed    bool
	running   atomic.Int32 // calls in progress
}

// NewState returns a fresh sandboxed state whose code runs until ctx ends (see Call).
// An already ended ctx is an error.
func (rt *Runtime) NewState(ctx context.Context, opts StateOptions) (*State, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if ctx.Err() != nil {
		return nil, &StopError{Cause: context.Cause(ctx)}
	}
	for name := range opts.Modules {
		if !ValidModuleName(name) {
			return nil, fmt.Errorf("luart: invalid Go module name %q", name)
		}
	}
	mb := opts.MemoryLimitMB
	if mb <= 0 {
		mb = DefaultMemoryLimitMB
	}
	s := &State{
		rt:      rt,
		print:   opts.Print,
		limit:   int64(mb) << 20,
		modules: opts.Modules,
		sources: opts.Sources,
	}
	if s.print == nil {
		s.print = io.Discard
	}
	s.ctx, s.cancel = context.WithCancelCause(ctx)
	s.ls = lua.NewState(luaOptions)
	s.setup()
	s.ls.SetContext(s.ctx)
	if !opts.Unwatched {
		s.watched = true
		heapWatch.add(s)
	}
	return s, nil
}

// setup opens the sandbox's libraries: fresh tables filled from sharedLibs (see libs.go),
// apollo's replacements of the builtins that could run or allocate without bound, print,
// package and require.
func (s *State) setup() {
	L := s.ls
	libs := sharedLibs()
	G := L.G.Global
	setEntries(G, libs.base)
	G.RawSetString("_G", G)
	str := newLibTable(L, libs.str, len(replacedStr))
	tbl := newLibTable(L, libs.table, 1)
	math := newLibTable(L, libs.math, 0)
	co := newLibTable(L, libs.coroutine, 4)
	s.installBuiltins(L, str, tbl, libs.strFormat)
	str.RawSetString("__index", str)
	L.SetMetatable(lua.LString(""), str) // string methods: ("x"):upper()
	G.RawSetString(lua.StringLibName, str)
	G.RawSetString(lua.TabLibName, tbl)
	G.RawSetString(lua.MathLibName, math)
	G.RawSetString(lua.CoroutineLibName, co)
	G.RawSetString("print", L.NewFunction(s.luaPrint))
	G.RawSetString("tonumber", libs.tonumber)
	s.quiet = L.NewFunction(trampoline(raiseQuiet, false, &s.overflow))
	G.RawSetString("pcall", L.NewFunction(s.pcall))
	G.RawSetString("xpcall", L.NewFunction(s.xpcall))
	co.RawSetString("resume", L.NewFunction(s.coResume))
	co.RawSetString("wrap", L.NewFunction(s.coWrap))
	co.RawSetString("create", L.NewFunction(s.coCreate))
	co.RawSetString("yield", luaBottom(L, libs.coYield))
	unavailable(L, G, libs.globalsIndex)
	unavailable(L, str, libs.stringIndex)

	// package and require. gopher-lua's package library is not opened: its Lua searcher reads
	// package.path (and LUA_PATH) on every require. require is apollo's own and looks only at
	// the Go modules, ModuleDirs and Bundled; package.loaders lists the same searchers for
	// scripts that look, but require does not read it, nor package.path.
	loaded := L.CreateTable(0, 8)
	pkg := L.CreateTable(0, 5)
	loaded.RawSetString("_G", G)
	loaded.RawSetString(lua.CoroutineLibName, co)
	loaded.RawSetString(lua.MathLibName, math)
	loaded.RawSetString(lua.LoadLibName, pkg)
	loaded.RawSetString(lua.StringLibName, str)
	loaded.RawSetString(lua.TabLibName, tbl)
	L.G.Registry.RawSetString("_LOADED", loaded)
	s.loaded = loaded
	pkg.RawSetString("loaded", loaded)
	loaders := L.CreateTable(2, 0)
	loaders.Append(L.NewFunction(s.searchGo))
	loaders.Append(L.NewFunction(s.searchLua))
	pkg.RawSetString("loaders", loaders)
	pkg.RawSetString("path", lua.LString(""))
	pkg.RawSetString("cpath", lua.LString(""))
	pkg.RawSetString("config", lua.LString("/\n;\n?\n!\n-\n"))
	unavailable(L, pkg, libs.packageIndex)
	G.RawSetString(lua.LoadLibName, pkg)
	s.require = L.NewFunction(s.luaRequire)
	G.RawSetString("require", s.require)
}

// L returns the state's gopher-lua state, for Go modules and the engine to set globals and
// convert values. Run code through DoChunk, DoFile, Require and Call, which classify errors.
func (s *State) L() *lua.LState { return s.ls }

// Context returns the state's context: the one given to NewState, also cancelled by the
// memory limit and Close. Go helpers that block should honour it (L.Context() is the same).
func (s *State) Context() context.Context { return s.ctx }

// Close stops the state and frees it. It is safe to call more than once.
func (s *State) Close() {
	if s.closed {
		return
	}
	s.closed = true
	s.cancel(nil)
	if s.watched {
		heapWatch.remove(s)
	}
	s.ls.Close()
}

// Preload adds a Go module after NewState, as StateOptions.Modules does.
func (s *State) Preload(name string, loader lua.LGFunction) error {
	if !ValidModuleName(name) {
		return fmt.Errorf("luart: invalid Go module name %q", name)
	}
	if !s.ownMods {
		s.modules = maps.Clone(s.modules)
		if s.modules == nil {
			s.modules = make(map[string]lua.LGFunction)
		}
		s.ownMods = true
	}
	s.modules[name] = loader
	return nil
}

// DoChunk compiles source named chunkName (cached; see Runtime.Compile) and runs it, returning
// its results. chunkName is a project-relative path or "pipeline.yaml:step_id" for inline
// bodies; errors read "chunkName:line: message".
func (s *State) DoChunk(chunkName, source string) ([]lua.LValue, error) {
	if s.closed {
		return nil, ErrClosed
	}
	proto, err := s.Compile(chunkName, source)
	if err != nil {
		return nil, err
	}
	return s.Call(s.ls.NewFunctionFromProto(proto))
}

// Compile compiles source named chunkName through the runtime's cache (Runtime.Compile), and
// keeps the source, so that a runtime error in it can be explained from its text (explain.go).
func (s *State) Compile(chunkName, source string) (*lua.FunctionProto, error) {
	return s.CompileAt(chunkName, source, 1)
}

// CompileAt compiles source as Compile does, numbering its first line line (see
// Runtime.CompileAt): errors and tracebacks of a chunk that is part of a bigger file (an inline
// body in a pipeline file) name the file's lines ("pipeline.yaml:12: ...").
func (s *State) CompileAt(chunkName, source string, line int) (*lua.FunctionProto, error) {
	proto, err := s.rt.CompileAt(chunkName, source, line)
	if err != nil {
		return nil, err
	}
	if s.chunks == nil {
		s.chunks = make(map[string]chunkSource, 2)
	}
	s.chunks[chunkName] = chunkSource{text: source, offset: max(line, 1) - 1}
	return proto, nil
}

// chunkSource is the text of a chunk compiled in a state, and how far its lines are shifted.
type chunkSource struct {
	text   string
	offset int
}

// DoFile runs a .lua file: path is relative to Options.Root, or absolute inside it, and may
// not leave it. The chunk is named by its path relative to the root.
func (s *State) DoFile(path string) ([]lua.LValue, error) {
	if s.closed {
		return nil, ErrClosed
	}
	rel, err := s.rt.rootRel(path)
	if err != nil {
		return nil, err
	}
	if pinned, ok := s.sources[FileKey(rel)]; ok {
		return s.DoChunk(pinned.Chunk, pinned.Text)
	}
	src, err := readInRoot(s.rt.root, rel)
	if err != nil {
		return nil, fmt.Errorf("luart: %w", err)
	}
	return s.DoChunk(filepath.ToSlash(rel), src)
}

// Require loads a module by name as require does (Go modules, then ModuleDirs, then Bundled)
// and returns its value. For `uses:` steps: a module returning {run = ..., cleanup = ...}.
func (s *State) Require(name string) (lua.LValue, error) {
	res, err := s.Call(s.require, lua.LString(name))
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return lua.LNil, nil
	}
	return res[0], nil
}

// Call calls fn with args in the state's context and returns its results. A Lua error is a
// *ScriptError; a state stopped by its context or its memory limit returns a *StopError whose
// cause classifies it (errors.Is with ErrTimeout, ErrMemory, context.Canceled).
func (s *State) Call(fn lua.LValue, args ...lua.LValue) ([]lua.LValue, error) {
	if s.closed {
		return nil, ErrClosed
	}
	if s.ctx.Err() != nil {
		return nil, &StopError{Cause: context.Cause(s.ctx)}
	}
	L := s.ls
	if s.traced == nil {
		s.traced = L.NewFunction(trampoline(s.raiseTraced, true, nil))
	}
	base := L.GetTop()
	L.Push(s.traced)
	L.Push(fn)
	for _, a := range args {
		L.Push(a)
	}
	s.running.Add(1)
	err := L.PCall(len(args)+1, lua.MultRet, nil)
	s.running.Add(-1)
	if err != nil {
		L.SetTop(base)
		return nil, s.convertError(err)
	}
	n := L.GetTop() - base
	res := make([]lua.LValue, n)
	for i := range res {
		res[i] = L.Get(base + 1 + i)
	}
	L.SetTop(base)
	return res, nil
}

// convertError classifies an error from PCall: by the context's cause first, then by the
// error value.
func (s *State) convertError(err error) error {
	var ae *lua.ApiError
	if !errors.As(err, &ae) {
		return err
	}
	trace := ae.StackTrace
	if trace == noTraceback {
		trace = ""
	}
	if s.ctx.Err() != nil {
		msg, _ := ae.Object.(lua.LString)
		return &StopError{Where: position(string(msg)), Cause: context.Cause(s.ctx), Traceback: trace}
	}
	se := &ScriptError{Traceback: trace}
	switch v := ae.Object.(type) {
	case lua.LString:
		se.Msg = s.explain(string(v))
	case *lua.LTable:
		se.Msg, se.Value = s.describeTable(v)
	case nil:
		se.Msg = "nil"
	default:
		se.Msg = v.String()
		se.Value, _ = ToGo(v)
	}
	if ae.Type == lua.ApiErrorPanic {
		se.Msg = "go panic: " + se.Msg
	}
	return se
}

// describeTable turns an error value that is a table into a message: its __tostring if it has
// one (run for at most the runtime's ToStringBudget: it could loop), or else its JSON form.
func (s *State) describeTable(t *lua.LTable) (string, any) {
	v, convErr := ToGo(t)
	if fn, ok := s.ls.GetMetaField(t, "__tostring").(*lua.LFunction); ok {
		ctx, cancel := context.WithTimeout(s.ctx, s.rt.toStringBudget)
		defer cancel()
		L := s.ls
		L.SetContext(ctx)
		top := L.GetTop()
		L.Push(fn)
		L.Push(t)
		err := PCall(L, 1, 1)
		var msg string
		if str, ok := L.Get(-1).(lua.LString); ok && err == nil {
			msg = string(str)
		}
		L.SetTop(top)
		L.SetContext(s.ctx)
		if err == nil && msg != "" {
			return msg, v
		}
	}
	if convErr == nil {
		if b, err := EncodeJSON(v); err == nil && len(b) > 2 {
			return string(b), v
		}
	}
	return "(error object is a table value)", v
}

func (s *State) luaPrint(L *lua.LState) int {
	var b strings.Builder
	for i := 1; i <= L.GetTop(); i++ {
		if i > 1 {
			b.WriteByte('\t')
		}
		b.WriteString(L.ToStringMeta(L.Get(i)).String())
	}
	b.WriteByte('\n')
	io.WriteString(s.print, b.String())
	return 0
}

// luaRequire is require: package.loaded, then the Go modules, ModuleDirs and Bundled.
func (s *State) luaRequire(L *lua.LState) int {
	name := L.CheckString(1)
	if v := s.loaded.RawGetString(name); lua.LVAsBool(v) {
		L.Push(v)
		return 1
	}
	if !ValidModuleName(name) {
		L.RaiseError("require %q: invalid module name (want dotted names such as deploy.helpers, not paths)", name)
	}
	if s.loading[name] {
		L.RaiseError("require %q: loop (the module requires itself)", name)
	}
	loader, err := s.findLoader(L, name)
	if err != nil {
		L.RaiseError("require %q: %v", name, err)
	}
	if s.loading == nil {
		s.loading = make(map[string]bool)
	}
	s.loading[name] = true
	defer delete(s.loading, name)
	top := L.GetTop()
	L.Push(loader)
	L.Push(lua.LString(name))
	L.Call(1, 1)
	ret := L.Get(-1)
	L.SetTop(top)
	if ret != lua.LNil {
		s.loaded.RawSetString(name, ret)
	} else if s.loaded.RawGetString(name) == lua.LNil {
		s.loaded.RawSetString(name, lua.LTrue)
	}
	L.Push(s.loaded.RawGetString(name))
	return 1
}

// findLoader returns the function that loads module name. A Lua module that does not compile
// raises its syntax error, positioned in the module.
func (s *State) findLoader(L *lua.LState, name string) (*lua.LFunction, error) {
	if fn, ok := s.modules[name]; ok {
		return L.NewFunction(fn), nil
	}
	chunk, src, err := s.findModule(name)
	if errors.Is(err, errModuleNotFound) {
		return nil, fmt.Errorf("module not found (searched the Go modules, %s)", s.rt.searched())
	}
	if err != nil {
		return nil, err
	}
	proto, err := s.Compile(chunk, src)
	if err != nil {
		L.Error(lua.LString(err.Error()), 0)
	}
	return L.NewFunctionFromProto(proto), nil
}

// findModule returns module name's source: as pinned in the state's
// Sources, or else as the runtime finds it on disk.
func (s *State) findModule(name string) (chunk, src string, err error) {
	if pinned, ok := s.sources[ModuleKey(name)]; ok {
		return pinned.Chunk, pinned.Text, nil
	}
	return s.rt.findModule(name)
}

// searchGo and searchLua are the entries of package.loaders, for scripts that call them;
// require itself does not go through package.loaders.
func (s *State) searchGo(L *lua.LState) int {
	name := L.CheckString(1)
	if fn, ok := s.modules[name]; ok {
		L.Push(L.NewFunction(fn))
		return 1
	}
	L.Push(lua.LString(fmt.Sprintf("\n\tno Go module %q", name)))
	return 1
}

func (s *State) searchLua(L *lua.LState) int {
	name := L.CheckString(1)
	if !ValidModuleName(name) {
		L.Push(lua.LString(fmt.Sprintf("\n\tinvalid module name %q", name)))
		return 1
	}
	chunk, src, err := s.findModule(name)
	if err != nil {
		L.Push(lua.LString(fmt.Sprintf("\n\tno module %q: %v", name, err)))
		return 1
	}
	proto, err := s.Compile(chunk, src)
	if err != nil {
		L.Error(lua.LString(err.Error()), 0)
	}
	L.Push(L.NewFunctionFromProto(proto))
	return 1
}
