// Package luart is apollo's Lua runtime, on gopher-lua v1.1.2: sandboxed states, the module
// loader, limits, Go↔Lua values and canonical JSON. It knows nothing of the engine or the event
// log; the engine runs step bodies through it and package stdlib registers Go modules
// (apollo.idem, apollo.fs, ...) through StateOptions.Modules.
//
// # Runtimes and states
//
// A Runtime compiles chunks once and caches the protos by chunk name and content hash; a source
// already compiled under another name (steps with the same body) is renamed, not compiled
// again. Protos are shared, states never are. Every step body, script, module and cleanup runs
// in a fresh State from NewState, which must be closed:
//
//	rt := luart.New(luart.Options{ModuleDirs: dirs, Bundled: scripts.FS, Root: project})
//	ctx, cancel := context.WithTimeoutCause(ctx, timeout, luart.ErrTimeout)
//	defer cancel()
//	s, err := rt.NewState(ctx, luart.StateOptions{Print: out, MemoryLimitMB: 256, Modules: mods})
//	if err != nil { ... }
//	defer s.Close()
//	res, err := s.DoChunk("pipeline.yaml:load", body)
//
// Chunks are named by project-relative paths without gopher-lua's "@", so errors read
// "scripts/load.lua:12: boom". A Lua error is a *ScriptError (message with position,
// traceback, and the error value when it is a table); a state stopped from outside is a
// *StopError whose Cause is context.Cause of its context, so callers classify with errors.Is
// (ErrTimeout, ErrMemory, context.Canceled), never by message text. A state keeps the source of
// each chunk it compiles, so that gopher-lua's terse "attempt to index a non-table
// object(nil) with key 'rows'" can name the expression from the failing line: "attempt to
// index nil value 'ctx.outputs.fetch' with key 'rows'", and a call of a value that is not a
// function the call (explain.go).
//
// # The sandbox
//
// Only the base, table, string, math and coroutine libraries are opened; never os, io, debug or
// channel. Each state gets its own library tables, filled with only the allowed functions
// (libs.go): gopher-lua's Go functions are taken once per process and shared, which is safe
// because nothing a script can reach changes a function value. dofile, loadfile, load,
// loadstring, collectgarbage, module, getfenv, setfenv, newproxy, _printregs and string.dump
// are removed (dofile() and loadfile() with no argument would read standard input;
// collectgarbage runs a GC of the whole process). print writes to StateOptions.Print. Reading a removed name (dofile, os, io, debug, string.dump,
// package.loadlib, ...) raises "'os' is not available in the apollo sandbox" with the script's
// position, rather than yielding nil, so even `if os then` fails loudly; rawget(_G, "os") is
// nil. gopher-lua cannot load bytecode; a chunk starting with "\x1bLua" gets a clear error.
//
// Coroutines never have a Go function as their bottom frame, which gopher-lua mishandles
// (protect.go): coroutine.create(print) would end without switching back to its resumer, and
// coroutine.create(coroutine.yield), or a body ending in `return coroutine.yield(x)`, crashed
// the VM on its next resume. coroutine.create and coroutine.wrap give a Go function a Lua
// function that calls it, and coroutine.yield is such a Lua function.
//
// require is apollo's own. It accepts only module names ([A-Za-z0-9_]+ parts joined by dots: no
// paths, no ".."), and looks in package.loaded, then the state's Go modules, then a/b.lua and
// a/b/init.lua in each of Options.ModuleDirs (opened through os.Root: no escape by "..", absolute
// paths or symbolic links), then in Options.Bundled. gopher-lua's package library is not opened,
// because its searcher reads package.path, and LUA_PATH from the environment, on every require.
// A `package` table is provided for scripts that read it (loaded, loaders, path = "",
// cpath = ""), but require reads neither package.loaders nor package.path, so a script cannot
// redirect it. package.loaded is the real cache: a script may put a value there, even under a
// Go module's name, but that changes only what its own state's later requires return — states
// are fresh, so no other step sees it. There is no package.preload; Go modules come from
// StateOptions.Modules or State.Preload, where scripts cannot reach.
//
// # Limits
//
// Time: the state's context (derived from NewState's, with its own cancel cause) is set with
// LState.SetContext, which gopher-lua checks before every VM instruction: an endless loop stops
// when the context ends, also inside pcall (the next instruction raises again), xpcall
// handlers, coroutines (their threads get child contexts), table.sort comparators and gsub
// callbacks. What SetContext cannot interrupt is a single long Go call, so the string
// functions that could run long are replaced: string.find, match, gmatch and gsub use a Lua
// 5.1 pattern matcher (pattern.go) that checks the context every few thousand steps, so a
// backtracking pattern such as ("a*"):rep(30).."c" stops at the deadline; gmatch is lazy and
// gsub linear. table.sort without a comparator, string.upper and the like still run to the end
// of their (bounded) input.
//
// A stopped state must also end promptly, which gopher-lua's error path does not promise: its
// PCall traces the stack of every error it catches, with a line per tail call ever made, so
// the timeout of `local function f() return f() end` spent seconds and gigabytes on a
// traceback. Protected calls here (State.Call, pcall, xpcall, and PCall for Go modules) run
// under a trampoline of their own (protect.go) that raises errors with a short traceback (the
// first frames; none once the state is stopped), so gopher-lua builds none.
//
// Memory: gopher-lua has no allocator hook, so a state's memory cannot be measured; only the
// process heap can. Two mechanisms bound it:
//   - Builtins that make one big result in one Go call check its size first and stop the
//     state with ErrMemory when it is over the cap: string.rep (min(16 MiB, the limit)),
//     table.concat, string.gsub and string.format (the limit). table.concat does not use the
//     value stack, so joining 100k strings works.
//   - A process-wide heap watchdog (watchdog.go) polls runtime/metrics every 5 ms while any state
//     is open. Its budget is the heap baseline when the first of the open states was created
//     plus the sum of the open states' limits. Over budget (live data, confirmed by a GC) it
//     cancels one state with cause ErrMemory: the newest running state whose lifetime saw the
//     heap grow by its limit. This stops `..`-doubling and table-growth bombs with ErrMemory
//     while the process and the other states carry on. Attribution is per process, so it is a
//     heuristic: a state started while another was running away may be the one stopped, and a
//     lone state can use the whole budget of the idle ones, and a heap of millions of small
//     tables makes each confirming GC take seconds. The watchdog never sets
//     debug.SetMemoryLimit; the engine decides that. A state made with
//     StateOptions.Unwatched is left out: its process bounds its memory itself.
//
// Not bounded in-process: one allocation larger than the free memory (a `..` of two huge
// strings, a coroutine-per-item explosion between two polls) can still end the process with a
// fatal out-of-memory error, and Go helpers that ignore L.Context() cannot be interrupted.
// That is why the engine runs step bodies in child processes, one state at a time, each under
// a hard limit of its own (engine/luaproc), and in the runner only when a step asks for it. The value stack is capped at 1M slots (RegistryMaxSize), the
// call depth at 256 frames (deeper recursion fails with "chunk:line: stack overflow (more than
// 256 nested calls)") and coroutine nesting at MaxCoroutineDepth, 200 (a coroutine resuming
// one that resumes one ...; deeper fails with "chunk:line: coroutine nesting deeper than 200"),
// as each level holds a Lua thread and Go stack, and 100,000 levels took minutes to unwind.
//
// # Values and JSON
//
// ToGo converts Lua values to plain Go data (nil, bool, float64, string, []any,
// map[string]any) and FromGo converts back; EncodeJSON writes canonical JSON (sorted keys, no
// HTML escaping, integers without ".0") and DecodeJSON reads JSON into Lua. The rules:
//   - Arrays: a table whose keys are the positive integers is a []any as long as its largest
//     key; holes become nil, so {1, nil, 3} is [1,null,3]. A table with more holes than values
//     and more than 16 holes is refused as sparse, as are tables mixing string and integer keys.
//   - Null: JSON null is Null (json.null), one protected userdata shared by every state, inside
//     arrays, where a Lua nil would lose the position. In objects a null member is left out
//     (Lua tables cannot hold nil), and FromGo leaves out nil map values; a top-level null is
//     nil. Null values in tables become nil in Go.
//   - Empty tables are arrays ([]), unless marked as objects: DecodeJSON and FromGo mark empty
//     objects (MarkObject), and a script can use setmetatable(t, {__jsontype = "object"}).
//   - Numbers are float64, integral ones stay integral; NaN and Inf are refused; functions,
//     userdata, threads, cycles and nesting beyond MaxDepth are errors naming the path
//     ("outputs.x.y: cannot encode function").
//
// # Known gopher-lua bugs (v1.1.2) for script authors
//
// `x = x and f() and g()` and `a, b = a + 1, a + b`, assigned to locals, are miscompiled; the
// sandbox rewrites both shapes before compiling (miscompile.go). Arithmetic reads a numeric
// string with leading zeros as octal ("010" + 0 is 8), and
// `for x in (a .. b):gmatch(c .. d) do` crashes the VM (a Go nil dereference, reported as a
// "go panic" *ScriptError; compute the strings into locals first). gopher-lua's tonumber, which
// read "1e3" as nil, is replaced by the sandbox's own (toNumber).
package luart
