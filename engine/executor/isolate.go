package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"apollo/engine/luaproc"
	"apollo/engine/pipeline"
	"apollo/engine/textfmt"
	"apollo/luart"
	"apollo/stdlib"
)

// Lua attempts in Lua processes.
//
// Every Lua attempt (but isolation: inprocess ones) runs in a child apollo
// process, `apollo __lua-attempt`, which serves attempts one at a time over
// its stdin and stdout through package luaproc, each under the step's
// memory_mb as a hard limit. The runner keeps a pool of them per Lua
// executor (Lua.processes): pre-started, reused while they stay small, and
// replaced when one dies, is stopped or goes over its limit. isolation:
// process gets a fresh Lua process for the attempt alone (Isolated).
//
// The runner stays the log's only writer: a Lua process asks it for markers and
// to record them (markerRequest), and waits for the answer, so an
// idem.once marker is durable before the code it guards runs. The runner
// makes the STEP_START durable while the Lua process reads the job, makes
// the state and runs the body, then sends its outcome (luaproc.Pool.RunSent):
// the body's first effect (print, apollo.*) waits for it (Lua.runHere), and
// a body that has none has sent its result by then. A Lua process writes the attempt's output
// file itself (print, apollo.log); when the runner stops or loses a Lua process,
// it adds the error line.

// IsolatedCommand is the hidden subcommand a Lua process runs: apollo
// __lua-attempt serves Lua attempts on its stdin and stdout until its stdin
// ends (RunIsolatedChild).
const IsolatedCommand = "__lua-attempt"

// isolatedJob is one Lua attempt as the runner sends it to a Lua process. Paths
// are absolute: the Lua process's working directory is the runner's, but the
// job must not depend on it.
type isolatedJob struct {
	// PipelinePath, PipelineDir and Modules are the pipeline's; Step is
	// what the Lua process needs of the step, not the step: a job is sent
	// for every attempt, and the whole step is mostly what a Lua body never
	// reads.
	PipelinePath string                     `json:"pipeline_path"`
	PipelineDir  string                     `json:"pipeline_dir"`
	Modules      []string                   `json:"modules,omitempty"`
	Step         isolatedStep               `json:"step"`
	StepID       string                     `json:"step_id"`
	TaskID       string                     `json:"task_id"`
	RetryCount   int                        `json:"retry_count"`
	Cleanup      bool                       `json:"cleanup"`
	InputDigest  string                     `json:"input_digest"`
	Vars         map[string]string          `json:"vars"`
	Params       map[string]any             `json:"params"`
	Upstream     map[string]json.RawMessage `json:"upstream"`
	ArtifactsDir string                     `json:"artifacts_dir"`
	StateDir     string                     `json:"state_dir"`
	Dir          string                     `json:"dir"`
	Workdir      string                     `json:"workdir"` // the Lua executor's, for chunk names
	OutputPath   string                     `json:"output_path"`
	OutputLimit  int64                      `json:"output_limit,omitempty"`
	// Env holds the attempt's APOLLO_* variables, which apollo.exec gives
	// the commands it starts (the tags crash recovery finds them by), and
	// its TRACEPARENT.
	Env []string `json:"env,omitempty"`
	// Failed, Secrets and MaskValues are the Attempt's Failed, Secrets and
	// Mask (its values): secrets travel on the pipe, never on disk.
	Failed     []FailedStep      `json:"failed,omitempty"`
	Secrets    map[string]string `json:"secrets,omitempty"`
	MaskValues []string          `json:"mask,omitempty"`
	// Sources are the Attempt's: the Lua process runs the files as the runner
	// read them.
	Sources luart.Sources `json:"sources,omitempty"`
}

// isolatedStep is what a Lua process reads of a step (Lua.Run and the
// standard library's view of it, stepEnv).
type isolatedStep struct {
	ID             string            `json:"id"`
	Lua            string            `json:"lua,omitempty"`
	LuaLine        int               `json:"lua_line,omitempty"`
	Script         string            `json:"script,omitempty"`
	Uses           string            `json:"uses,omitempty"`
	CleanupLua     string            `json:"cleanup_lua,omitempty"`
	CleanupLuaLine int               `json:"cleanup_lua_line,omitempty"`
	CleanupScript  string            `json:"cleanup_script,omitempty"`
	MemoryMB       int               `json:"memory_mb,omitempty"`
	Timeout        time.Duration     `json:"timeout,omitempty"`
	Allow          []string          `json:"allow,omitempty"`
	HTTPHosts      []string          `json:"http_hosts"` // nil (any host) is not [] (none)
	Item           map[string]string `json:"item,omitempty"`
}

func newIsolatedStep(s *pipeline.Step) isolatedStep {
	return isolatedStep{ID: s.ID, Lua: s.Lua, LuaLine: s.LuaLine, Script: s.Script, Uses: s.Uses,
		CleanupLua: s.CleanupLua, CleanupLuaLine: s.CleanupLuaLine, CleanupScript: s.CleanupScript,
		MemoryMB: s.MemoryMB, Timeout: s.Timeout, Allow: s.Allow, HTTPHosts: s.HTTPHosts, Item: s.Item}
}

func (s isolatedStep) step() *pipeline.Step {
	return &pipeline.Step{ID: s.ID, Lua: s.Lua, LuaLine: s.LuaLine, Script: s.Script, Uses: s.Uses,
		CleanupLua: s.CleanupLua, CleanupLuaLine: s.CleanupLuaLine, CleanupScript: s.CleanupScript,
		MemoryMB: s.MemoryMB, Timeout: s.Timeout, Allow: s.Allow, HTTPHosts: s.HTTPHosts, Item: s.Item}
}

// isolatedResult is what the Lua process answers.
type isolatedResult struct {
	Err          string          `json:"error,omitempty"`
	OutputDigest string          `json:"output_digest"`
	Output       json.RawMessage `json:"output,omitempty"`
	TimedOut     bool            `json:"timed_out,omitempty"`
	Note         string          `json:"note,omitempty"`
}

// markerRequest is a Lua process's request for a marker ("get") or to record
// one ("record"); markerAnswer the runner's answer to a get.
type markerRequest struct {
	Op     string         `json:"op"`
	Name   string         `json:"name,omitempty"`
	Marker *stdlib.Marker `json:"marker,omitempty"`
}

type markerAnswer struct {
	Found  bool          `json:"found"`
	Marker stdlib.Marker `json:"marker"`
}

// Isolated runs each Lua attempt in a fresh Lua process of its own,
// started for it and ended after it (isolation: process): no earlier
// attempt's process, even a small one, is reused.
type Isolated struct {
	// Binary is the apollo executable to start.
	Binary string
}

// Run starts a Lua process, runs the attempt in it and ends it.
func (x *Isolated) Run(ctx context.Context, a *Attempt) Result {
	pool, err := newProcessPool(x.Binary, -1)
	if err != nil {
		if serr := a.Started(0); serr != nil {
			return Result{Err: serr, ExitCode: -1, NotStarted: true}
		}
		return Result{Err: err, ExitCode: -1}
	}
	defer pool.Close()
	return runInProcess(ctx, pool, a, a.Dir, workingDir())
}

// newProcessPool returns a pool of Lua processes running binary ("" for this
// executable), keeping maxIdle of them (see luaproc.Options). Its children
// inherit the runner's environment and working directory, and end when idle
// for a while or when the runner's end closes their stdin.
func newProcessPool(binary string, maxIdle int) (*luaproc.Pool, error) {
	if os.Getenv(luaProcessEnv) != "" {
		// A binary started as a Lua process that runs pipelines instead: a test
		// binary without the dispatch in its TestMain. Starting more would
		// start it again and again.
		return nil, fmt.Errorf("this process was started as a Lua process (%s) but runs a pipeline: its main must dispatch %s to RunIsolatedChild", luaProcessEnv, IsolatedCommand)
	}
	if binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the apollo binary for the Lua processes: %w", err)
		}
		binary = exe
	}
	return luaproc.New(luaproc.Options{Path: binary, Args: []string{IsolatedCommand},
		Env: append(os.Environ(), luaProcessEnv+"=1"), MaxIdle: maxIdle}), nil
}

// luaProcessEnv marks the environment of a Lua process.
const luaProcessEnv = "APOLLO_LUA_PROCESS"

// workingDir is the process's working directory, or "" when it cannot be
// told (paths then stay as they are).
func workingDir() string {
	wd, _ := os.Getwd()
	return wd
}

// absIn returns path made absolute against cwd, the working directory.
func absIn(cwd, path string) string {
	if filepath.IsAbs(path) || cwd == "" {
		return filepath.Clean(path)
	}
	return filepath.Join(cwd, path)
}

// runInProcess runs a Lua attempt in a Lua process of pool; workdir is the Lua
// executor's, which chunk names are relative to, and cwd the working
// directory relative paths are taken from (the Lua process's is the same, but
// the job must not depend on it).
func runInProcess(ctx context.Context, pool *luaproc.Pool, a *Attempt, workdir, cwd string) Result {
	mem := memoryMB(a.Step)
	job, err := json.Marshal(newIsolatedJob(a, workdir, cwd))
	if err != nil {
		if serr := a.Started(0); serr != nil {
			return Result{Err: serr, ExitCode: -1, NotStarted: true}
		}
		return Result{Err: fmt.Errorf("encode the Lua attempt for its Lua process: %w", err), ExitCode: -1}
	}
	// The STEP_START is made durable once the job is sent, while the Lua
	// process reads it, makes the state and runs the body up to its first
	// effect, which waits for the runner's word: the outcome, sent next. A
	// start that could not be recorded stops the job (its body may compute
	// on and on) and ends the Lua process.
	var started bool
	var serr error
	jctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	start := func() error {
		started, serr = true, a.Started(0)
		if serr != nil {
			stop(serr)
		}
		return serr
	}
	out, err := pool.RunSent(jctx, job, luaproc.Limits{MemoryMB: mem, KillGrace: a.KillGrace}, start, markerRequests(a))
	if !started {
		start()
	}
	if serr != nil {
		return Result{Err: serr, ExitCode: -1, NotStarted: true}
	}
	var ans isolatedResult
	answered := len(out) > 0 && json.Unmarshal(out, &ans) == nil
	res := Result{ExitCode: 1}
	res.TimedOut, res.Interrupted = endCause(ctx)
	var memErr *luaproc.MemoryError
	switch {
	case res.TimedOut:
		res.Err = fmt.Errorf("timed out after %s: the Lua state was stopped", a.Step.Timeout)
		answered = false
	case res.Interrupted:
		res.Err = errors.New("interrupted: apollo was asked to stop; the Lua state was stopped")
		answered = false
	case errors.As(err, &memErr) && answered && ans.Err != "":
		// The Lua process's meter stopped the state; the Lua process says where.
		res.Err, res.Note = errors.New(ans.Err), ans.Note
	case errors.As(err, &memErr):
		res.Err = fmt.Errorf("%w: the Lua process ran out of memory; raise memory_mb if the step needs more", memErr)
		answered = false
	case err != nil:
		res.Err = err
	case !answered:
		res.Err = errors.New("the Lua process's answer cannot be read")
	case ans.Err != "":
		res.Err, res.TimedOut, res.Note = errors.New(ans.Err), ans.TimedOut, ans.Note
	default:
		res.ExitCode = 0
		res.OutputDigest, res.Output, res.Note = ans.OutputDigest, ans.Output, ans.Note
	}
	if res.Err != nil && !answered {
		// The Lua process wrote no error line: it was stopped, or died.
		appendLine(a.OutputPath, "error: "+a.Mask.String(textfmt.OneLine(res.Err.Error(), 2000)))
	}
	return res
}

// newIsolatedJob describes a for a Lua process; relative paths are taken
// from cwd.
func newIsolatedJob(a *Attempt, workdir, cwd string) isolatedJob {
	var tags []string
	for _, kv := range a.Env {
		if strings.HasPrefix(kv, "APOLLO_") || strings.HasPrefix(kv, "TRACEPARENT=") {
			tags = append(tags, kv)
		}
	}
	abs := func(p string) string { return absIn(cwd, p) }
	return isolatedJob{PipelinePath: a.Pipeline.Path, PipelineDir: abs(a.Pipeline.Dir), Modules: a.Pipeline.Modules,
		Step: newIsolatedStep(a.Step), StepID: a.StepID, TaskID: a.TaskID, RetryCount: a.RetryCount,
		Cleanup: a.Cleanup, InputDigest: a.InputDigest, Vars: a.Vars, Params: a.Params, Upstream: a.Upstream,
		ArtifactsDir: abs(a.ArtifactsDir), StateDir: abs(a.StateDir), Dir: abs(a.Dir), Workdir: abs(workdir),
		OutputPath: abs(a.OutputPath), OutputLimit: a.OutputLimit, Env: tags,
		Failed: a.Failed, Secrets: a.Secrets, MaskValues: a.Mask.Values(), Sources: a.Sources}
}

// markerRequests answers a Lua process's marker requests from the task's
// markers; a record is durable when the answer is sent.
func markerRequests(a *Attempt) func(ctx context.Context, raw []byte) ([]byte, error) {
	return func(ctx context.Context, raw []byte) ([]byte, error) {
		var req markerRequest
		if err := json.Unmarshal(raw, &req); err != nil {
			return nil, fmt.Errorf("a Lua process's request cannot be read: %w", err)
		}
		if a.Markers == nil {
			return nil, errors.New("markers are not available here")
		}
		switch {
		case req.Op == "get":
			m, ok := a.Markers.Marker(req.Name)
			return json.Marshal(markerAnswer{Found: ok, Marker: m})
		case req.Op == "record" && req.Marker != nil:
			if err := a.Markers.RecordMarker(a.StepID, a.RetryCount, *req.Marker); err != nil {
				return nil, err
			}
			return []byte("{}"), nil
		}
		return nil, fmt.Errorf("a Lua process asked for %q, which the runner does not answer", req.Op)
	}
}

// remoteMarkers is a Lua process's MarkerStore: requests to the runner. A get
// that fails answers "no marker": whatever the caller does next records a
// marker first, which fails the same way, so nothing runs unguarded.
type remoteMarkers struct {
	call func(req []byte) ([]byte, error)
}

func (m remoteMarkers) Marker(name string) (stdlib.Marker, bool) {
	req, _ := json.Marshal(markerRequest{Op: "get", Name: name})
	raw, err := m.call(req)
	if err != nil {
		return stdlib.Marker{}, false
	}
	var ans markerAnswer
	if json.Unmarshal(raw, &ans) != nil || !ans.Found {
		return stdlib.Marker{}, false
	}
	return ans.Marker, true
}

func (m remoteMarkers) RecordMarker(step string, retry int, mk stdlib.Marker) error {
	req, err := json.Marshal(markerRequest{Op: "record", Marker: &mk})
	if err != nil {
		return err
	}
	if _, err := m.call(req); err != nil {
		return fmt.Errorf("record marker %q: %w", mk.Name, err)
	}
	return nil
}

// appendLine adds a line to an attempt's output file.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	io.WriteString(f, line+"\n")
}

// RunIsolatedChild is a Lua process's side: it serves the Lua attempts the
// runner sends on stdin, one at a time, each in a fresh state under the
// memory limit the runner sets (package luaproc), and answers on stdout,
// until stdin ends or ctx does (SIGTERM). bundled are the bundled
// modules, the same as the runner's when the binary is.
func RunIsolatedChild(ctx context.Context, stdin *os.File, stdout io.Writer, bundled fs.FS) error {
	// The mark is for binaries that do not get here; the commands a step
	// starts (an apollo run of its own) must not inherit it.
	os.Unsetenv(luaProcessEnv)
	executors := map[string]*Lua{} // by workdir, so compiled chunks are kept between jobs
	return luaproc.Serve(ctx, stdin, stdout, func(ctx context.Context, raw []byte, call func([]byte) ([]byte, error)) ([]byte, error) {
		var job isolatedJob
		if err := json.Unmarshal(raw, &job); err != nil {
			return nil, fmt.Errorf("%s: read the job: %w", IsolatedCommand, err)
		}
		step := job.Step.step()
		pl := &pipeline.Pipeline{Path: job.PipelinePath, Dir: job.PipelineDir, Modules: job.Modules, Steps: []*pipeline.Step{step}}
		x := executors[job.Workdir]
		if x == nil {
			x = &Lua{Bundled: bundled, Workdir: job.Workdir, luaProcess: true}
			executors[job.Workdir] = x
		}
		a := &Attempt{TaskID: job.TaskID, StepID: job.StepID, RetryCount: job.RetryCount, Step: step,
			Env: job.Env, Dir: job.Dir, OutputPath: job.OutputPath, OutputLimit: job.OutputLimit,
			Started: func(int) error { // the runner's word: the STEP_START is durable
				_, err := call(nil)
				return err
			},
			Pipeline: pl, Cleanup: job.Cleanup, InputDigest: job.InputDigest, Vars: job.Vars,
			Params: job.Params, Upstream: job.Upstream, ArtifactsDir: job.ArtifactsDir, StateDir: job.StateDir,
			Markers: remoteMarkers{call: call}, Failed: job.Failed, Secrets: job.Secrets,
			Mask: textfmt.NewMasker(job.MaskValues...), Sources: job.Sources}
		res := x.Run(ctx, a)
		ans := isolatedResult{OutputDigest: res.OutputDigest, Output: res.Output, TimedOut: res.TimedOut, Note: res.Note}
		if res.Err != nil {
			ans.Err = res.Err.Error()
		}
		return json.Marshal(ans)
	})
}
