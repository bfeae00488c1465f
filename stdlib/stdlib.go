package stdlib

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"

	"apollo/luart"
)

// Clock is an optional interface of an Env: when the Env has a Now method, apollo.log
// timestamps come from it (tests inject a fixed time); otherwise from time.Now.
type Clock interface {
	Now() time.Time
}

// ExecEnver is an optional interface of an Env: the variables it returns
// are added to the environment of every command exec.run starts. The engine
// tags a step's processes this way, so that after a crash it can find and
// end the ones an attempt left running.
type ExecEnver interface {
	ExecEnv() []string
}

// CommandStarter is an optional interface of an Env: exec.run starts its
// commands with StartCommand instead of cmd.Start. The engine's Lua processes
// start them without the memory limit the worker runs the step under, which
// a command would otherwise inherit.
type CommandStarter interface {
	StartCommand(cmd *exec.Cmd) error
}

// StartGate is an optional interface of an Env: the engine runs a step's
// body while the attempt's start is made durable, and the body's effects
// wait for it. Every function of a module built here (but apollo.json, which
// only computes) calls AwaitStart before it acts, and raises its error (the
// start could not be recorded) instead of acting. Its first call may block;
// the next ones return at once.
type StartGate interface {
	AwaitStart() error
}

// Capabilities is an optional interface of an Env: apollo.exec and
// apollo.http are capabilities a step is granted (allow:), not defaults.
// Allowed says whether the step has one ("exec", "http"); AllowHost whether
// apollo.http may reach host, redirects included. An Env without it (apollo
// script) has both.
type Capabilities interface {
	Allowed(capability string) bool
	AllowHost(host string) bool
}

// Modules returns the loaders of the standard library for one step, keyed by module name:
// "apollo.idem", "apollo.fs", "apollo.exec", "apollo.http", "apollo.json", "apollo.log",
// "apollo.digest", and "apollo.state" only when env also implements StateEnv. Pass them as
// luart.StateOptions.Modules; each loader builds a fresh module table for its state.
//
// Nothing is built before a script requires a module: most steps use few of them, and a step
// pays for a fresh state anyway. The confined areas (which resolve symbolic links) are set up
// by the first helper that takes a path.
func Modules(env Env) map[string]lua.LGFunction {
	lib := &library{env: env}
	lib.confine = sync.OnceValue(func() *confinement { return newConfinement(env.Workspace(), env.StateDir()) })
	mods := map[string]lua.LGFunction{
		"apollo.idem":   lib.loader("idem", lib.idemFuncs),
		"apollo.fs":     lib.loader("fs", lib.fsFuncs),
		"apollo.exec":   lib.loader("exec", lib.execFuncs),
		"apollo.http":   lib.loader("http", lib.httpFuncs),
		"apollo.json":   lib.jsonLoader,
		"apollo.log":    lib.loader("log", lib.logFuncs),
		"apollo.digest": lib.loader("digest", lib.digestFuncs),
	}
	if st, ok := env.(StateEnv); ok {
		mods["apollo.state"] = lib.loader("state", func() map[string]lua.LGFunction { return stateFuncs(st) })
	}
	if caps, ok := env.(Capabilities); ok {
		for _, c := range []string{"exec", "http"} {
			if !caps.Allowed(c) {
				mods["apollo."+c] = denied(c)
			}
		}
	}
	return mods
}

// denied is the loader of a capability a step was not granted: requiring it
// fails, saying how to grant it.
func denied(capability string) lua.LGFunction {
	return func(L *lua.LState) int {
		L.RaiseError("apollo.%s is not allowed for this step: add allow: [%s] to the step (or to defaults:)", capability, capability)
		return 0
	}
}

// library is the standard library of one step: its Env and its confined file areas.
type library struct {
	env Env
	// confine returns the workspace and state directory areas, resolved on first use.
	confine func() *confinement

	mu sync.Mutex
	// guarding holds the markers whose idem.once (or idem.resource) call is running, to
	// refuse a call of the same name inside it.
	guarding map[string]bool
}

// loader returns a module loader that builds the module's table from funcs when a script
// requires it (module is its name in messages: "fs"). With a StartGate, each function waits
// for the attempt's start before it acts.
func (lib *library) loader(module string, funcs func() map[string]lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		fs := funcs()
		if g, ok := lib.env.(StartGate); ok {
			for name, fn := range fs {
				fs[name] = afterStart(g, module+"."+name, fn)
			}
		}
		t := L.CreateTable(0, len(fs))
		L.SetFuncs(t, fs)
		L.Push(t)
		return 1
	}
}

// afterStart is fn, called once g's start is durable; a start that could not be recorded
// raises its error.
func afterStart(g StartGate, name string, fn lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		if err := g.AwaitStart(); err != nil {
			raise(L, name, "the step's start could not be recorded: %v", err)
		}
		return fn(L)
	}
}

func (lib *library) now() time.Time {
	if c, ok := lib.env.(Clock); ok {
		return c.Now()
	}
	return time.Now()
}

// raise raises a Lua error "fn: message" at the calling script's position.
func raise(L *lua.LState, fn string, format string, args ...any) {
	L.RaiseError("%s", fn+": "+fmt.Sprintf(format, args...))
}

// argError raises "fn: bad argument #n (message)".
func argError(L *lua.LState, fn string, n int, format string, args ...any) {
	L.RaiseError("%s", fmt.Sprintf("%s: bad argument #%d (%s)", fn, n, fmt.Sprintf(format, args...)))
}

// checkString returns argument n, a string (a number is converted, as Lua does).
func checkString(L *lua.LState, fn string, n int, what string) string {
	switch v := L.Get(n).(type) {
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return v.String()
	default:
		argError(L, fn, n, "%s must be a string, got %s", what, typeName(v))
		return ""
	}
}

// checkPath returns argument n, a non-empty path string.
func checkPath(L *lua.LState, fn string, n int) string {
	p := checkString(L, fn, n, "path")
	if p == "" {
		argError(L, fn, n, "path is empty")
	}
	return p
}

// checkFunction returns argument n, a function.
func checkFunction(L *lua.LState, fn string, n int, what string) *lua.LFunction {
	f, ok := L.Get(n).(*lua.LFunction)
	if !ok {
		argError(L, fn, n, "%s must be a function, got %s", what, typeName(L.Get(n)))
	}
	return f
}

// optTable returns argument n, a table, or nil when it is nil or absent.
func optTable(L *lua.LState, fn string, n int, what string) *lua.LTable {
	switch v := L.Get(n).(type) {
	case *lua.LNilType:
		return nil
	case *lua.LTable:
		return v
	default:
		argError(L, fn, n, "%s must be a table, got %s", what, typeName(v))
		return nil
	}
}

// checkOptions raises an error naming the first key of opts that is not one of known (in
// sorted order, for a stable message), so a misspelt option is never silently ignored.
func checkOptions(L *lua.LState, fn string, opts *lua.LTable, known ...string) {
	if opts == nil {
		return
	}
	var unknown []string
	opts.ForEach(func(k, _ lua.LValue) {
		if s, ok := k.(lua.LString); !ok || !slices.Contains(known, string(s)) {
			unknown = append(unknown, L.ToStringMeta(k).String())
		}
	})
	if len(unknown) > 0 {
		slices.Sort(unknown)
		known = slices.Sorted(slices.Values(known))
		raise(L, fn, "unknown option %q (the options are %s)", unknown[0], strings.Join(known, ", "))
	}
}

// optSeconds reads field name of opts as a positive number of seconds; absent is def.
func optSeconds(L *lua.LState, fn string, opts *lua.LTable, name string, def time.Duration) time.Duration {
	if opts == nil {
		return def
	}
	switch v := opts.RawGetString(name).(type) {
	case *lua.LNilType:
		return def
	case lua.LNumber:
		f := float64(v)
		if !(f > 0) || f > 1e9 {
			raise(L, fn, "%s must be a positive number of seconds, got %s", name, v)
		}
		return time.Duration(f * float64(time.Second))
	default:
		raise(L, fn, "%s must be a number of seconds, got %s", name, typeName(v))
		return 0
	}
}

// optStringField reads field name of opts as a string; absent is "".
func optStringField(L *lua.LState, fn string, opts *lua.LTable, name string) (string, bool) {
	if opts == nil {
		return "", false
	}
	switch v := opts.RawGetString(name).(type) {
	case *lua.LNilType:
		return "", false
	case lua.LString:
		return string(v), true
	case lua.LNumber:
		return v.String(), true
	default:
		raise(L, fn, "%s must be a string, got %s", name, typeName(v))
		return "", false
	}
}

// stringMap reads a table of names to strings (numbers and booleans are converted).
func stringMap(L *lua.LState, fn, what string, v lua.LValue) map[string]string {
	switch v.(type) {
	case *lua.LNilType:
		return nil
	case *lua.LTable:
	default:
		raise(L, fn, "%s must be a table of names to strings, got %s", what, typeName(v))
	}
	m := map[string]string{}
	var bad string
	v.(*lua.LTable).ForEach(func(k, val lua.LValue) {
		ks, ok := k.(lua.LString)
		if !ok {
			if bad == "" {
				bad = fmt.Sprintf("%s has a key of type %s; keys must be strings", what, typeName(k))
			}
			return
		}
		switch val := val.(type) {
		case lua.LString:
			m[string(ks)] = string(val)
		case lua.LNumber, lua.LBool:
			m[string(ks)] = val.String()
		default:
			if bad == "" {
				bad = fmt.Sprintf("%s.%s must be a string, got %s", what, ks, typeName(val))
			}
		}
	})
	if bad != "" {
		raise(L, fn, "%s", bad)
	}
	return m
}

// typeName is a value's Lua type, with json.null named as such.
func typeName(v lua.LValue) string {
	if luart.IsNull(v) {
		return "json.null"
	}
	return v.Type().String()
}

// stepContext is the step's context: L.Context(), or Background for a state without one.
func stepContext(L *lua.LState) context.Context {
	if ctx := L.Context(); ctx != nil {
		return ctx
	}
	return context.Background()
}

// checkContext raises when the step's context has ended: a helper never starts work for a
// step that is being stopped.
func checkContext(L *lua.LState, fn string) {
	if ctx := stepContext(L); ctx.Err() != nil {
		raise(L, fn, "the step was stopped: %v", context.Cause(ctx))
	}
}
