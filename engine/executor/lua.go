package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"

	"apollo/engine/luaproc"
	"apollo/engine/pipeline"
	"apollo/luart"
	"apollo/stdlib"
)

// Lua runs Lua bodies (lua, script, uses) and Lua cleanup hooks, each in a
// fresh sandboxed state, in a pool of Lua processes (see isolate.go): a
// process runs one attempt at a time under the step's memory_mb as a hard
// limit, so the runner never holds a step's heap. A step with isolation:
// inprocess runs in the runner itself, bounded only by the runner's heap
// watchdog. Compiled chunks are shared through one runtime per pipeline (in
// each process); states never are.
type Lua struct {
	// Bundled holds the bundled step modules (scripts/), searched after the
	// pipeline's modules folders. A Lua process has its own (see
	// RunIsolatedChild): the same binary has the same.
	Bundled fs.FS
	// Workdir is the workspace; chunk names are relative to it.
	Workdir string

	// luaProcess is set in a Lua process: attempts run here, and the
	// process's memory meter (luaproc), not the heap watchdog, bounds them.
	luaProcess bool

	mu       sync.Mutex
	runtimes map[string]*luart.Runtime
	pool     *luaproc.Pool
	cwd      string // the working directory, read with the pool's making
}

func (x *Lua) runtime(p *pipeline.Pipeline) *luart.Runtime {
	x.mu.Lock()
	defer x.mu.Unlock()
	key := p.Dir + "\x00" + strings.Join(p.Modules, "\x00")
	if rt, ok := x.runtimes[key]; ok {
		return rt
	}
	if x.runtimes == nil {
		x.runtimes = map[string]*luart.Runtime{}
	}
	dirs := make([]string, len(p.Modules))
	for i, m := range p.Modules {
		dirs[i] = filepath.Join(p.Dir, m)
	}
	// Load checks script files through the same root (CheckRefs).
	rt := luart.New(luart.Options{ModuleDirs: dirs, Bundled: x.Bundled, Root: pipeline.LuaRoot(x.Workdir, p.Dir)})
	x.runtimes[key] = rt
	return rt
}

// Gather reads the Lua files step s of p loads, as its attempts will load
// them: its script and cleanup script, its uses module, and the modules
// these and its inline bodies require by a literal name (luart.Gather).
// Attempts given them (Attempt.Sources) run them as read here, whatever
// happens to the files later. None for a step without Lua.
func (x *Lua) Gather(p *pipeline.Pipeline, s *pipeline.Step) (luart.Sources, error) {
	var files, modules, inline []string
	for _, f := range []string{s.Script, s.CleanupScript} {
		if f != "" {
			files = append(files, filepath.Join(p.Dir, f))
		}
	}
	if s.Uses != "" {
		modules = append(modules, s.Uses)
	}
	for _, body := range []string{s.Lua, s.CleanupLua} {
		if body != "" {
			inline = append(inline, body)
		}
	}
	if files == nil && modules == nil && inline == nil {
		return nil, nil
	}
	// The standard library's modules are Go modules, all named apollo.*.
	return x.runtime(p).Gather(files, modules, inline, func(name string) bool { return strings.HasPrefix(name, "apollo.") })
}

// Run runs one Lua attempt or cleanup: in a Lua process, or here for
// isolation: inprocess (and in the Lua process itself).
func (x *Lua) Run(ctx context.Context, a *Attempt) Result {
	if x.luaProcess || a.Step.Isolation == "inprocess" {
		return x.runHere(ctx, a)
	}
	pool, err := x.processes()
	if err != nil {
		if serr := a.Started(0); serr != nil {
			return Result{Err: serr, ExitCode: -1, NotStarted: true}
		}
		return Result{Err: err, ExitCode: -1}
	}
	return runInProcess(ctx, pool, a, x.Workdir, x.cwd)
}

// Warm starts a Lua process in the background, when none is idle or being
// started: the engine calls it when a run has Lua steps, so that the first
// one does not wait for a process to start (about 18 ms).
func (x *Lua) Warm() {
	if x.luaProcess {
		return
	}
	if pool, err := x.processes(); err == nil {
		pool.Warm()
	}
}

// processes returns the pool of Lua processes, made on first use.
func (x *Lua) processes() (*luaproc.Pool, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.pool != nil {
		return x.pool, nil
	}
	pool, err := newProcessPool("", 0) // this executable; as many idle as were busy
	if err != nil {
		return nil, err
	}
	x.pool, x.cwd = pool, workingDir()
	return pool, nil
}

// runHere runs one Lua attempt or cleanup in this process.
//
// The body runs while its start is made durable (an fsync: mostly waiting for the disk), and
// its effects wait for it: print and every apollo.* call but apollo.json call awaitStart
// first, which returns once Started has. The sandbox has no other way
// out (no os, io or debug library), so what runs before the start is durable only computes:
// making the state, building ctx, the body's own code up to its first effect. A body that
// only computes is done by the time the start is durable.
//
// In the runner the body runs on its own goroutine while this one calls Started and then
// releases the waits; a start that could not be recorded stops the body and returns NotStarted. In
// a Lua process, Started asks the runner for its word (which it sends once the STEP_START is
// durable) and the body's first effect waits for it; a body that had none returns its result
// without it, and the Lua process reads the runner's word after the result (luaproc).
func (x *Lua) runHere(ctx context.Context, a *Attempt) Result {
	out := newOutput(a)
	defer out.Close()
	var value any
	var err error
	var awaitStart func() error
	if x.luaProcess {
		awaitStart = sync.OnceValue(func() error { return a.Started(0) })
		value, err = x.attempt(ctx, a, out, awaitStart)
	} else {
		var serr error
		started := make(chan struct{})
		awaitStart = func() error { <-started; return serr }
		bctx, stop := context.WithCancelCause(ctx)
		defer stop(nil)
		type ran struct {
			value any
			err   error
		}
		done := make(chan ran, 1)
		go func() {
			v, err := x.attempt(bctx, a, out, awaitStart)
			done <- ran{v, err}
		}()
		serr = a.Started(0)
		close(started)
		if serr != nil {
			stop(serr)
			<-done
			return Result{Err: serr, ExitCode: -1, NotStarted: true}
		}
		r := <-done
		value, err = r.value, r.err
	}
	res := Result{}
	res.TimedOut, res.Interrupted = endCause(ctx)
	switch {
	case errors.Is(err, luaproc.ErrMemoryLimit) || errors.Is(err, luart.ErrMemory):
		// The Lua process's memory meter, or a builtin asked for too much.
		res.TimedOut, res.Interrupted = false, false
		res.Err = fmt.Errorf("%w (memory_mb %d); raise memory_mb if the step needs more", err, memoryMB(a.Step))
	case errors.Is(err, luart.ErrTimeout) || res.TimedOut:
		res.TimedOut, res.Interrupted = true, false
		res.Err = fmt.Errorf("timed out after %s: the Lua state was stopped", a.Step.Timeout)
	case res.Interrupted:
		res.Err = errors.New("interrupted: apollo was asked to stop; the Lua state was stopped")
	case err != nil:
		res.Err = err
	}
	res.Note = out.cutNote()
	if res.Err != nil {
		// A Lua process the runner stopped writes nothing: the runner says why. The line is
		// an effect: it waits for the start (an attempt that never started has no output).
		if (!x.luaProcess || !res.Interrupted) && awaitStart() == nil {
			fmt.Fprintf(out, "error: %v\n", res.Err)
		}
		res.ExitCode = 1
		return res
	}
	if a.Cleanup {
		return res
	}
	enc, err := luart.EncodeJSON(value)
	if err != nil {
		res.Err = fmt.Errorf("the step's return value cannot be its output: %w", err)
		res.ExitCode = 1
		return res
	}
	sum := sha256.Sum256(enc)
	res.OutputDigest = "sha256:" + hex.EncodeToString(sum[:])
	if value != nil {
		res.Output = enc
	}
	return res
}

// attempt makes the attempt's fresh state, runs its body in it and closes it; the body's
// effects call awaitStart first.
func (x *Lua) attempt(ctx context.Context, a *Attempt, out io.Writer, awaitStart func() error) (any, error) {
	p := x.prepare(ctx, a, out, awaitStart)
	if p.st != nil {
		defer p.st.Close()
	}
	if p.err != nil {
		return nil, p.err
	}
	return x.body(p, a)
}

// gatedWriter is print's writer: a write waits for the start, and is dropped if it failed.
type gatedWriter struct {
	awaitStart func() error
	w          io.Writer
}

func (w gatedWriter) Write(p []byte) (int, error) {
	if err := w.awaitStart(); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}

// prepared is an attempt's state, ready to run its body.
type prepared struct {
	st        *luart.State // nil when err is set before the state was made
	ctxTable  *lua.LTable
	inline    *lua.FunctionProto // the compiled inline body, if it has one
	inlineErr error              // why it does not compile
	err       error              // why the state could not be prepared
}

// prepare makes the attempt's fresh state with its ctx global, and compiles an inline body,
// without running any script code; print and the standard library call awaitStart before
// they act. A state it returns must be closed, also with an error.
func (x *Lua) prepare(ctx context.Context, a *Attempt, out io.Writer, awaitStart func() error) prepared {
	var p prepared
	rt := x.runtime(a.Pipeline)
	env := &stepEnv{a: a, out: out, luaProcess: x.luaProcess, awaitStart: awaitStart}
	p.st, p.err = rt.NewState(ctx, luart.StateOptions{
		Print: gatedWriter{awaitStart, out}, MemoryLimitMB: a.Step.MemoryMB, Modules: stdlib.Modules(env), Unwatched: x.luaProcess,
		Sources: a.Sources})
	if p.err != nil {
		return p
	}
	L := p.st.L()
	if p.ctxTable, p.err = luaContext(L, a); p.err != nil {
		return p
	}
	L.SetGlobal("ctx", p.ctxTable)
	if name, src, line := inlineBody(a); src != "" {
		p.inline, p.inlineErr = p.st.CompileAt(name, src, line)
	}
	return p
}

// inlineBody returns the chunk name, source and first line of the inline Lua the attempt runs
// (a cleanup_lua: hook, or else a lua: body), or "" when it runs a file or a module.
func inlineBody(a *Attempt) (name, src string, line int) {
	s := a.Step
	switch {
	case a.Cleanup && s.CleanupLua != "":
		name, line = pipeline.InlineChunk(a.Pipeline.Path, s.ID, ".cleanup", s.CleanupLuaLine)
		return name, s.CleanupLua, line
	case a.Cleanup && s.CleanupScript != "":
		return "", "", 0
	case s.Lua != "":
		name, line = pipeline.InlineChunk(a.Pipeline.Path, s.ID, "", s.LuaLine)
		return name, s.Lua, line
	}
	return "", "", 0
}

// body runs the body (or cleanup) in p's state and returns its value as Go data.
func (x *Lua) body(p prepared, a *Attempt) (any, error) {
	s := a.Step
	st := p.st
	var results []lua.LValue
	var err error
	switch {
	case p.inlineErr != nil:
		return nil, p.inlineErr
	case p.inline != nil:
		results, err = st.Call(st.L().NewFunctionFromProto(p.inline))
	case a.Cleanup && s.CleanupScript != "":
		results, err = st.DoFile(filepath.Join(a.Pipeline.Dir, s.CleanupScript))
	case s.Script != "":
		results, err = st.DoFile(filepath.Join(a.Pipeline.Dir, s.Script))
	case s.Uses != "":
		results, err = x.callModule(st, s.Uses, a.Cleanup, p.ctxTable)
	default:
		return nil, fmt.Errorf("step %q has no Lua body", s.ID)
	}
	if err != nil || len(results) == 0 {
		return nil, err
	}
	return luart.ToGo(results[0])
}

// callModule runs a `uses` module's run(ctx), or its cleanup(ctx) when it
// has one.
func (x *Lua) callModule(st *luart.State, name string, cleanup bool, ctxTable lua.LValue) ([]lua.LValue, error) {
	mod, err := st.Require(name)
	if err != nil {
		return nil, err
	}
	t, ok := mod.(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("module %q returns a %s, not a table with run(ctx)", name, mod.Type())
	}
	fnName := "run"
	if cleanup {
		fnName = "cleanup"
	}
	fn := t.RawGetString(fnName)
	if fn == lua.LNil {
		if cleanup {
			return nil, nil // the module brings no cleanup: nothing to do
		}
		return nil, fmt.Errorf("module %q has no run(ctx) function", name)
	}
	if fn.Type() != lua.LTFunction {
		return nil, fmt.Errorf("module %q: %s is a %s, not a function", name, fnName, fn.Type())
	}
	return st.Call(fn, ctxTable)
}

// luaContext builds the ctx table a Lua body sees (docs/spec.md §6).
func luaContext(L *lua.LState, a *Attempt) (*lua.LTable, error) {
	t := L.CreateTable(0, 8)
	t.RawSetString("task_id", lua.LString(a.TaskID))
	t.RawSetString("step_id", lua.LString(a.StepID))
	t.RawSetString("retry_count", lua.LNumber(a.RetryCount))
	t.RawSetString("input_digest", lua.LString(a.InputDigest))
	t.RawSetString("artifacts_dir", lua.LString(a.ArtifactsDir))
	if tp := envValue(a.Env, "TRACEPARENT"); tp != "" {
		t.RawSetString("traceparent", lua.LString(tp))
	}
	vars := L.CreateTable(0, len(a.Vars))
	for k, v := range a.Vars {
		vars.RawSetString(k, lua.LString(v))
	}
	t.RawSetString("vars", vars)
	params := L.CreateTable(0, len(a.Params))
	for k, v := range a.Params {
		params.RawSetString(k, luart.FromGo(L, v))
	}
	t.RawSetString("params", params)
	outputs := L.CreateTable(0, len(a.Upstream))
	ids := make([]string, 0, len(a.Upstream))
	for id := range a.Upstream {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		raw := a.Upstream[id]
		if len(raw) == 0 {
			continue
		}
		v, err := luart.DecodeJSON(L, raw)
		if err != nil {
			return nil, fmt.Errorf("output of step %q: %w", id, err)
		}
		outputs.RawSetString(id, v)
	}
	t.RawSetString("outputs", outputs)
	if a.Secrets != nil {
		secrets := L.CreateTable(0, len(a.Secrets))
		for k, v := range a.Secrets {
			secrets.RawSetString(k, lua.LString(v))
		}
		t.RawSetString("secrets", secrets)
	}
	if item := a.Step.Item; item != nil {
		if v, ok := item["item"]; ok {
			t.RawSetString("item", lua.LString(v))
		} else {
			axes := L.CreateTable(0, len(item))
			for k, v := range item {
				axes.RawSetString(strings.TrimPrefix(k, "item."), lua.LString(v))
			}
			t.RawSetString("item", axes)
		}
	}
	if a.Failed != nil {
		failed := L.CreateTable(len(a.Failed), 0)
		for _, f := range a.Failed {
			e := L.CreateTable(0, 3)
			e.RawSetString("id", lua.LString(f.ID))
			e.RawSetString("error", lua.LString(f.Error))
			e.RawSetString("optional", lua.LBool(f.Optional))
			failed.Append(e)
		}
		t.RawSetString("failed", failed)
	}
	return t, nil
}

// memoryMB is the step's memory limit in MiB.
func memoryMB(s *pipeline.Step) int {
	if s.MemoryMB > 0 {
		return s.MemoryMB
	}
	return luart.DefaultMemoryLimitMB
}

func absOr(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// stepEnv is the standard library's view of one attempt.
type stepEnv struct {
	a          *Attempt
	out        io.Writer
	luaProcess bool         // the attempt runs in a Lua process
	awaitStart func() error // returns once the attempt's start is durable, or why it is not
}

// AwaitStart makes the standard library's calls wait for the attempt's durable start.
func (e *stepEnv) AwaitStart() error { return e.awaitStart() }

func (e *stepEnv) TaskID() string      { return e.a.TaskID }
func (e *stepEnv) StepID() string      { return e.a.StepID }
func (e *stepEnv) RetryCount() int     { return e.a.RetryCount }
func (e *stepEnv) InputDigest() string { return e.a.InputDigest }
func (e *stepEnv) Workspace() string   { return absOr(e.a.Dir) }
func (e *stepEnv) StateDir() string    { return absOr(e.a.StateDir) }
func (e *stepEnv) Log() io.Writer      { return e.out }

// Allowed says whether the step was granted capability (allow:).
func (e *stepEnv) Allowed(capability string) bool {
	return slices.Contains(e.a.Step.Allow, capability)
}

// AllowHost says whether apollo.http may reach host: any host, unless the
// step's allow: lists them.
func (e *stepEnv) AllowHost(host string) bool { return e.a.Step.AllowsHost(host) }

// ExecEnv tags the commands apollo.exec starts with the attempt, like the
// processes of a shell step, so a resume after a crash can end them, and
// gives them its TRACEPARENT, so that their spans join the run's trace.
func (e *stepEnv) ExecEnv() []string {
	var tags []string
	for _, kv := range e.a.Env {
		if strings.HasPrefix(kv, "APOLLO_") || strings.HasPrefix(kv, "TRACEPARENT=") {
			tags = append(tags, kv)
		}
	}
	return tags
}

// StartCommand starts a command apollo.exec runs. In a Lua process, the command
// does not inherit the Lua process's RLIMIT_DATA: memory_mb bounds the Lua
// state, not the programs it runs (as in the runner).
func (e *stepEnv) StartCommand(cmd *exec.Cmd) error {
	if e.luaProcess {
		return luaproc.WithoutDataLimit(cmd.Start)
	}
	return cmd.Start()
}

func (e *stepEnv) Marker(name string) (stdlib.Marker, bool) {
	if e.a.Markers == nil {
		return stdlib.Marker{}, false
	}
	return e.a.Markers.Marker(name)
}

func (e *stepEnv) RecordMarker(m stdlib.Marker) error {
	if e.a.Markers == nil {
		return errors.New("markers are not available here")
	}
	return e.a.Markers.RecordMarker(e.a.StepID, e.a.RetryCount, m)
}

// envValue is the value of the last name=value entry of env, "" if none.
func envValue(env []string, name string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], name+"="); ok {
			return v
		}
	}
	return ""
}
