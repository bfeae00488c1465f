package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"

	"apollo/luart"
	"apollo/stdlib"
)

// Lua runs Lua bodies (lua, script, uses) and Lua cleanup hooks, each in a
// fresh sandboxed state. Compiled chunks are shared through one runtime per
// pipeline; states never are.
type Lua struct {
	// Bundled holds the bundled step modules (scripts/), searched after the
	// pipeline's modules folders.
	Bundled fs.FS
	// Workdir is the workspace; chunk names are relative to it.
	Workdir string

	mu       sync.Mutex
	runtimes map[string]*luart.Runtime
}

func (x *Lua) runtime(p *Pipeline) *luart.Runtime {
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
	// Chunk names are relative to the workspace, so errors read
	// "steps/load.lua:12: …"; a pipeline kept outside the workspace names
	// its scripts relative to its own folder.
	root := absOr(x.Workdir)
	if rel, err := filepath.Rel(root, p.Dir); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		root = p.Dir
	}
	rt := luart.New(luart.Options{ModuleDirs: dirs, Bundled: x.Bundled, Root: root})
	x.runtimes[key] = rt
	return rt
}

// Run runs one Lua attempt or cleanup.
func (x *Lua) Run(ctx context.Context, a *Attempt) Result {
	out := &lazyOutput{path: a.OutputPath}
	defer out.Close()
	if err := a.Started(0); err != nil {
		return Result{Err: err, ExitCode: -1, NotStarted: true}
	}
	value, err := x.call(ctx, a, out)
	res := Result{}
	res.TimedOut, res.Interrupted = endCause(ctx)
	switch {
	case errors.Is(err, luart.ErrTimeout) || res.TimedOut:
		res.TimedOut, res.Interrupted = true, false
		res.Err = fmt.Errorf("timed out after %s: the Lua state was stopped", a.Step.Timeout)
	case errors.Is(err, luart.ErrMemory):
		res.Err = fmt.Errorf("%w; raise memory_mb or use isolation: process", err)
	case res.Interrupted:
		res.Err = errors.New("interrupted: apollo was asked to stop; the Lua state was stopped")
	case err != nil:
		res.Err = err
	}
	if res.Err != nil {
		fmt.Fprintf(out, "error: %v\n", res.Err)
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

// call runs the body (or cleanup) and returns its value as Go data.
func (x *Lua) call(ctx context.Context, a *Attempt, out io.Writer) (any, error) {
	s := a.Step
	memory := s.MemoryMB
	env := &stepEnv{a: a, out: out, workspace: absOr(a.Dir), stateDir: absOr(a.StateDir)}
	st, err := x.runtime(a.Pipeline).NewState(ctx, luart.StateOptions{
		Print: out, MemoryLimitMB: memory, Modules: stdlib.Modules(env)})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	L := st.L()
	ctxTable, err := luaContext(L, a)
	if err != nil {
		return nil, err
	}
	L.SetGlobal("ctx", ctxTable)

	var results []lua.LValue
	chunk := fmt.Sprintf("%s[%s]", a.Pipeline.Path, s.ID)
	switch {
	case a.Cleanup && s.CleanupLua != "":
		results, err = st.DoChunk(chunk+".cleanup", s.CleanupLua)
	case a.Cleanup && s.CleanupScript != "":
		results, err = st.DoFile(filepath.Join(a.Pipeline.Dir, s.CleanupScript))
	case s.Lua != "":
		results, err = st.DoChunk(chunk, s.Lua)
	case s.Script != "":
		results, err = st.DoFile(filepath.Join(a.Pipeline.Dir, s.Script))
	case s.Uses != "":
		results, err = x.callModule(st, s.Uses, a.Cleanup, ctxTable)
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

// luaContext builds the ctx table a Lua body sees (SPEC §6).
func luaContext(L *lua.LState, a *Attempt) (*lua.LTable, error) {
	t := L.NewTable()
	t.RawSetString("task_id", lua.LString(a.TaskID))
	t.RawSetString("step_id", lua.LString(a.StepID))
	t.RawSetString("retry_count", lua.LNumber(a.RetryCount))
	t.RawSetString("input_digest", lua.LString(a.InputDigest))
	t.RawSetString("artifacts_dir", lua.LString(a.ArtifactsDir))
	vars := L.NewTable()
	for k, v := range a.Vars {
		vars.RawSetString(k, lua.LString(v))
	}
	t.RawSetString("vars", vars)
	params := L.NewTable()
	for k, v := range a.Params {
		params.RawSetString(k, luart.FromGo(L, v))
	}
	t.RawSetString("params", params)
	outputs := L.NewTable()
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
	return t, nil
}

func absOr(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// stepEnv is the standard library's view of one attempt.
type stepEnv struct {
	a         *Attempt
	out       io.Writer
	workspace string
	stateDir  string
}

func (e *stepEnv) TaskID() string      { return e.a.TaskID }
func (e *stepEnv) StepID() string      { return e.a.StepID }
func (e *stepEnv) RetryCount() int     { return e.a.RetryCount }
func (e *stepEnv) InputDigest() string { return e.a.InputDigest }
func (e *stepEnv) Workspace() string   { return e.workspace }
func (e *stepEnv) StateDir() string    { return e.stateDir }
func (e *stepEnv) Log() io.Writer      { return e.out }

// ExecEnv tags the commands apollo.exec starts with the attempt, like the
// processes of a shell step, so a resume after a crash can end them.
func (e *stepEnv) ExecEnv() []string {
	var tags []string
	for _, kv := range e.a.Env {
		if strings.HasPrefix(kv, "APOLLO_") {
			tags = append(tags, kv)
		}
	}
	return tags
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
