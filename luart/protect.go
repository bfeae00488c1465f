package luart

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
)

// Protected calls without gopher-lua's tracebacks.
//
// LState.PCall without an error handler gives every error it catches a traceback of the whole
// stack (LState.stackTrace) unless the error already has one. That traceback has a line for
// every tail call made by a frame still on the stack, and nothing caps it: the timeout that
// stops `local function f() return f() end return f()` after 2 s meets a hundred million tail
// calls, and building their lines took 8 to 13 s and 0.8 to 1.7 GB before the step could end.
// The raise path does not build one: raiseError and Error call LState.Panic, which PCall sets
// to a function that panics with a bare *lua.ApiError.
//
// So every protected call here (State.Call, pcall, xpcall, PCall) calls a small Go trampoline
// under LState.PCall, which installs a Panic function of ours for the duration of the call (PCall
// restores the previous one when it returns). Ours panics with an error that already carries a
// traceback, so PCall builds none: for State.Call a short one (the first maxTraceFrames frames,
// none once the state is stopped), and for pcall, xpcall and PCall a placeholder, since their
// callers drop it. The trampoline also turns Go panics into such errors, the way PCall would
// but without the traceback; gopher-lua's call-stack overflow is one ("lua callstack overflow",
// raised by the growing call stack MinimizeStackMemory selects), which becomes
// "chunk:line: stack overflow (...)" at the call that overflowed.
//
// xpcall runs the script's handler in a protected call of its own, so a handler that fails or
// loops ends in the same cheap way; gopher-lua would trace the stack when its handler fails.

// maxTraceFrames is how many frames a traceback lists.
const maxTraceFrames = 16

// noTraceback marks an error whose traceback was not kept; convertError drops it.
const noTraceback = "stack traceback:\n\t(not kept)"

// callstackOverflow is the Go panic of gopher-lua's growing call stack when it is full.
const callstackOverflow = "lua callstack overflow"

// MaxCoroutineDepth is how deeply coroutines may be nested: a coroutine resuming one that
// resumes one, and so on. Each level costs a Lua thread and a Go stack frame chain, and an
// error at the bottom of 100,000 levels took minutes to unwind.
const MaxCoroutineDepth = 200

// trampoline returns the Go function that protected calls run under PCall: its arguments are
// the function to call and its arguments, its results the function's. raise becomes the
// thread's Panic function; traced says whether Go panics get a traceback. overflow, if not
// nil, keeps the message of the last call-stack overflow, for xpcall, whose handler cannot be
// called on a full stack.
func trampoline(raise func(*lua.LState), traced bool, overflow *lua.LString) lua.LGFunction {
	return func(L *lua.LState) int {
		L.Panic = raise
		defer func() {
			if r := recover(); r != nil {
				ae := goPanicError(L, r, traced)
				if msg, ok := ae.Object.(lua.LString); ok && overflow != nil && r == callstackOverflow {
					*overflow = msg
				}
				panic(ae)
			}
		}()
		L.Call(L.GetTop()-1, lua.MultRet)
		return L.GetTop()
	}
}

// goPanicError returns r, a value recovered from a panic under a trampoline, as a
// *lua.ApiError with a traceback, so that PCall builds none: Lua errors pass unchanged (given
// a traceback if they come without, from a coroutine's thread), the call-stack overflow
// becomes a Lua error at the script's position, and other Go panics are reported as PCall
// would ("go panic: ..." in convertError).
func goPanicError(L *lua.LState, r any, traced bool) *lua.ApiError {
	ae, isLua := r.(*lua.ApiError)
	if isLua && ae.StackTrace != "" {
		return ae
	}
	trace := noTraceback
	if traced && (L.Context() == nil || L.Context().Err() == nil) {
		trace = traceback(L)
	}
	if isLua {
		ae.StackTrace = trace
		return ae
	}
	msg := fmt.Sprint(r)
	if msg == callstackOverflow {
		return &lua.ApiError{Type: lua.ApiErrorRun, Object: overflowMessage(L), StackTrace: trace}
	}
	return &lua.ApiError{Type: lua.ApiErrorPanic, Object: lua.LString(msg), StackTrace: trace}
}

// overflowMessage is the error of a call that overflowed the call stack, placed at the
// innermost Lua frame of L.
func overflowMessage(L *lua.LState) lua.LString {
	return lua.LString(fmt.Sprintf("%sstack overflow (more than %d nested calls)", luaWhere(L), luaOptions.CallStackSize))
}

// luaWhere returns "chunk:line: " of the innermost Lua frame of L, or "".
func luaWhere(L *lua.LState) string {
	for level := 0; level < maxTraceFrames; level++ {
		dbg, ok := L.GetStack(level)
		if !ok {
			break
		}
		if _, err := L.GetInfo("Sl", dbg, lua.LNil); err != nil {
			break
		}
		if dbg.Source != "" && dbg.CurrentLine > 0 {
			return fmt.Sprintf("%s:%d: ", dbg.Source, dbg.CurrentLine)
		}
		if dbg.What == "tail" {
			break // the levels past a tail-calling frame do not name frames (see traceback)
		}
	}
	return ""
}

// raiseQuiet is the Panic function of pcall, xpcall and PCall: the error without a traceback.
func raiseQuiet(L *lua.LState) {
	panic(&lua.ApiError{Type: lua.ApiErrorRun, Object: raisedValue(L), StackTrace: noTraceback})
}

// raiseTraced is the Panic function of State.Call: the error with a short traceback, unless
// the state was stopped (its traceback is of no use, and could be of any size).
func (s *State) raiseTraced(L *lua.LState) {
	trace := noTraceback
	if s.ctx.Err() == nil {
		trace = traceback(L)
	}
	panic(&lua.ApiError{Type: lua.ApiErrorRun, Object: raisedValue(L), StackTrace: trace})
}

// raisedValue is the error value a Panic function is called with: on top of L's stack. A
// wrapped coroutine's error arrives here from the coroutine's thread, where a call-stack
// overflow is still the Go panic's text; it gets the coroutine's position.
func raisedValue(L *lua.LState) lua.LValue {
	v := L.Get(-1)
	if s, ok := v.(lua.LString); ok && string(s) == callstackOverflow {
		return overflowMessage(L)
	}
	return v
}

// traceback lists the first maxTraceFrames frames of L's stack, as gopher-lua's tracebacks
// do. It stops at a frame that made tail calls: gopher-lua counts one stack level per tail
// call, and the levels beyond name no frame.
func traceback(L *lua.LState) string {
	var b strings.Builder
	b.WriteString("stack traceback:")
	for level := 0; ; level++ {
		dbg, ok := L.GetStack(level)
		if !ok {
			break
		}
		if level == maxTraceFrames {
			b.WriteString("\n\t...")
			break
		}
		if _, err := L.GetInfo("nSl", dbg, lua.LNil); err != nil {
			break
		}
		goFn := dbg.Source == "" // only Lua functions have a source
		if goFn && dbg.What == "main" {
			break // the trampoline at the bottom of the stack
		}
		b.WriteString("\n\t")
		if goFn {
			b.WriteString("[G]:")
		} else {
			fmt.Fprintf(&b, "%s:%d:", dbg.Source, dbg.CurrentLine)
		}
		switch {
		case !goFn && dbg.LineDefined == 0:
			b.WriteString(" in main chunk")
		case dbg.Name == "":
			b.WriteString(" in ?")
		case dbg.Name[0] == '(' || dbg.Name[0] == '<':
			b.WriteString(" in function " + dbg.Name)
		default:
			b.WriteString(" in function '" + dbg.Name + "'")
		}
		if dbg.What == "tail" {
			b.WriteString("\n\t(tail calls)\n\t...")
			break
		}
	}
	return b.String()
}

// errorValue returns the Lua value of an error from PCall.
func errorValue(err error) lua.LValue {
	if ae, ok := errors.AsType[*lua.ApiError](err); ok && ae.Object != nil {
		return ae.Object
	}
	return lua.LString(err.Error())
}

// quietCall is the trampoline of PCall.
var quietCall = trampoline(raiseQuiet, false, nil)

// PCall is LState.PCall(nargs, nret, nil) for Go modules that call script code and handle its
// errors themselves (the function is below its nargs arguments on the stack): an error, also
// a timeout in an endless tail call, comes back without a traceback, where gopher-lua's PCall
// would build one of any size.
func PCall(L *lua.LState, nargs, nret int) error {
	L.Insert(L.NewFunction(quietCall), L.GetTop()-nargs)
	return L.PCall(nargs+1, nret, nil)
}

// pcall is the sandbox's pcall: Lua 5.1's, through the quiet trampoline.
func (s *State) pcall(L *lua.LState) int {
	L.CheckAny(1)
	v := L.Get(1)
	if v.Type() != lua.LTFunction && L.GetMetaField(v, "__call").Type() != lua.LTFunction {
		L.Push(lua.LFalse)
		L.Push(lua.LString("attempt to call a " + v.Type().String() + " value"))
		return 2
	}
	nargs := L.GetTop() - 1
	L.Insert(s.quiet, 1)
	if err := L.PCall(nargs+1, lua.MultRet, nil); err != nil {
		L.Push(lua.LFalse)
		L.Push(errorValue(err))
		return 2
	}
	L.Insert(lua.LTrue, 1)
	return L.GetTop()
}

// xpcall is the sandbox's xpcall: Lua 5.1's, through the quiet trampoline, with the handler
// run by xpcallHandler.
func (s *State) xpcall(L *lua.LState) int {
	fn := L.CheckFunction(1)
	handler := L.CheckFunction(2)
	top := L.GetTop()
	L.Push(s.quiet)
	L.Push(fn)
	s.overflow = ""
	if err := L.PCall(1, lua.MultRet, L.NewClosure(s.xpcallHandler, handler)); err != nil {
		e := errorValue(err)
		if e == lua.LString(callstackOverflow) && s.overflow != "" {
			// The handler could not be called on the full stack; the error is the
			// overflow, at its own position.
			e = s.overflow
		}
		L.Push(lua.LFalse)
		L.Push(e)
		return 2
	}
	L.Insert(lua.LTrue, top+1)
	return L.GetTop() - top
}

// xpcallHandler calls the script's error handler (its upvalue) with the error, in a protected
// call: if the handler fails, its error is xpcall's. Once the state is stopped the handler is
// not called; the error stands.
func (s *State) xpcallHandler(L *lua.LState) int {
	e := L.Get(1)
	if s.ctx.Err() != nil {
		L.Push(e)
		return 1
	}
	L.Push(s.quiet)
	L.Push(L.Get(lua.UpvalueIndex(1)))
	L.Push(e)
	if err := L.PCall(2, 1, nil); err != nil {
		L.Push(errorValue(err))
	}
	return 1
}

// checkNesting raises an error when L, a thread about to resume a coroutine, is nested
// MaxCoroutineDepth deep already, or when th (nil for coroutine.wrap) is one of the threads
// resuming L: a "normal" coroutine, which Lua does not resume. The walk up the resumers is
// bounded, so a cycle cannot make it loop.
func checkNesting(L, th *lua.LState) {
	depth := 0
	for p := L; p != nil && depth <= MaxCoroutineDepth; p = p.Parent {
		if p == th && p != L {
			L.RaiseError("cannot resume non-suspended coroutine")
		}
		depth++
	}
	if depth > MaxCoroutineDepth {
		L.RaiseError("coroutine nesting deeper than %d", MaxCoroutineDepth)
	}
}

// coResume is coroutine.resume with the nesting check. A coroutine that overflowed its call
// stack returns false and gopher-lua's Go panic text; it gets the message and position a
// script sees elsewhere.
func (s *State) coResume(L *lua.LState) int {
	th := L.CheckThread(1)
	checkNesting(L, th)
	n := sharedLibs().coResume(L)
	if n == 2 && L.Get(-2) == lua.LFalse && L.Get(-1) == lua.LString(callstackOverflow) {
		L.Replace(-1, overflowMessage(th))
	}
	return n
}

// coWrap is coroutine.wrap returning a function that checks the nesting before it resumes.
func (s *State) coWrap(L *lua.LState) int {
	libs := sharedLibs()
	if fn := L.CheckFunction(1); fn.IsG {
		L.Replace(1, luaBottom(L, fn))
	}
	libs.coWrap(L)
	inner, _ := L.Get(-1).(*lua.LFunction)
	var th *lua.LState
	if inner != nil && len(inner.Upvalues) == 1 {
		th, _ = inner.Upvalues[0].Value().(*lua.LState)
	}
	if th == nil {
		L.RaiseError("coroutine.wrap: gopher-lua's wrapped coroutine has changed shape")
	}
	L.Push(L.NewClosure(s.wrapped, th))
	return 1
}

// wrapped is the function coroutine.wrap returns; its upvalue is the coroutine.
func (s *State) wrapped(L *lua.LState) int {
	th := L.ToThread(lua.UpvalueIndex(1))
	checkNesting(L, th)
	L.Insert(th, 1)
	return sharedLibs().coResume(L)
}

// Coroutines whose bottom frame is a Go function.
//
// gopher-lua switches back from a coroutine to its resumer only when a Lua function returns or
// yields at the bottom of the coroutine's stack. A coroutine created from a Go function
// (coroutine.create(print)) ends without switching back: resume returns nothing, the thread
// stays the "current" one (the next resume says "can not resume a running thread"), and
// coroutine.create(coroutine.yield) crashes the VM with a nil dereference on its second
// resume. A Lua body that tail-calls yield (`return coroutine.yield(x)`) makes yield the bottom
// frame and crashes the same way. So the sandbox never lets a Go function become a
// coroutine's bottom frame: coroutine.create and coroutine.wrap give a Go function a Lua
// function that calls it, and coroutine.yield is itself such a Lua function, so a tail call
// of it replaces the body with a Lua frame. The calls are not tail calls, and keep every
// result (nil ones too).

// bottomSource is the Lua function standing in for a Go function f: the chunk's varargs are
// its arguments. It reads f, pack and unpack from its own environment, a private table.
const bottomSource = "local r = pack(f(...))\nreturn unpack(r, 1, r.n)"

// bottomChunk names it in error positions (`coroutine.create(error)` resumed with "x" says
// "[Go function]:1: x").
const bottomChunk = "[Go function]"

var bottomProto = sync.OnceValue(func() *lua.FunctionProto {
	proto, err := compile(bottomChunk, bottomSource)
	if err != nil {
		panic("luart: " + err.Error())
	}
	return proto
})

// luaBottom returns a Lua function calling the Go function fn with its arguments and
// returning all its results.
func luaBottom(L *lua.LState, fn *lua.LFunction) *lua.LFunction {
	libs := sharedLibs()
	env := L.CreateTable(0, 3)
	env.RawSetString("f", fn)
	env.RawSetString("pack", libs.pack)
	env.RawSetString("unpack", libs.unpack)
	wrapper := L.NewFunctionFromProto(bottomProto())
	wrapper.Env = env
	return wrapper
}

// packResults returns its arguments in a table, with their count as n (Lua 5.2's table.pack).
func packResults(L *lua.LState) int {
	n := L.GetTop()
	t := L.CreateTable(n, 1)
	for i := 1; i <= n; i++ {
		t.RawSetInt(i, L.Get(i))
	}
	t.RawSetString("n", lua.LNumber(n))
	L.Push(t)
	return 1
}

// coCreate is coroutine.create, with a Lua bottom frame for a Go function.
func (s *State) coCreate(L *lua.LState) int {
	if fn := L.CheckFunction(1); fn.IsG {
		L.Replace(1, luaBottom(L, fn))
	}
	return sharedLibs().coCreate(L)
}
