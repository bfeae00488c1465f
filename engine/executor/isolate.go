package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os/exec"
	"runtime/debug"
	"syscall"

	"apollo/engine/markers"
	"apollo/engine/pipeline"
	"apollo/engine/textfmt"
	"apollo/eventlog"
)

// IsolatedCommand is the hidden subcommand that runs one Lua attempt in a
// child apollo process (isolation: process).
const IsolatedCommand = "__lua-attempt"

// isolatedJob is what the parent sends the child on stdin.
type isolatedJob struct {
	Pipeline     *pipeline.Pipeline         `json:"pipeline"`
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
	OutputPath   string                     `json:"output_path"`
	OutputLimit  int64                      `json:"output_limit,omitempty"`
	LogPath      string                     `json:"log_path"`
	MemoryMB     int                        `json:"memory_mb"`
	Failed       []FailedStep               `json:"failed,omitempty"`
	Secrets      map[string]string          `json:"secrets,omitempty"`
	MaskValues   []string                   `json:"mask,omitempty"`
}

// isolatedResult is what the child answers on stdout.
type isolatedResult struct {
	Err          string          `json:"error,omitempty"`
	OutputDigest string          `json:"output_digest"`
	Output       json.RawMessage `json:"output,omitempty"`
	TimedOut     bool            `json:"timed_out,omitempty"`
	Note         string          `json:"note,omitempty"`
}

// Isolated runs a Lua attempt in a child apollo process with a hard memory
// limit (on Linux, see limitData) and a hard kill: for scripts whose cost
// cannot be bounded inside the runner. The child appends its MARKER records to the log
// itself, under the log's flock, as apollo script does.
type Isolated struct {
	// Binary is the apollo executable to start.
	Binary string
	// LogPath is the task's log, for the child's markers.
	LogPath string
}

// Run starts the child, sends it the attempt and waits for its answer.
func (x *Isolated) Run(ctx context.Context, a *Attempt) Result {
	if err := a.Started(0); err != nil {
		return Result{Err: err, ExitCode: -1, NotStarted: true}
	}
	mem := a.Step.MemoryMB
	if mem <= 0 {
		mem = 256
	}
	job := isolatedJob{Pipeline: a.Pipeline, StepID: a.StepID, TaskID: a.TaskID, RetryCount: a.RetryCount,
		Cleanup: a.Cleanup, InputDigest: a.InputDigest, Vars: a.Vars, Params: a.Params, Upstream: a.Upstream,
		ArtifactsDir: a.ArtifactsDir, StateDir: a.StateDir, Dir: a.Dir, OutputPath: a.OutputPath, OutputLimit: a.OutputLimit,
		LogPath: x.LogPath, MemoryMB: mem, Failed: a.Failed, Secrets: a.Secrets, MaskValues: a.Mask.Values()}
	in, err := json.Marshal(job)
	if err != nil {
		return Result{Err: fmt.Errorf("isolation: encode the attempt: %w", err), ExitCode: -1}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(x.Binary, IsolatedCommand)
	cmd.Dir = a.Dir
	cmd.Env = a.Env
	cmd.Stdin = bytes.NewReader(in)
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return Result{Err: fmt.Errorf("isolation: start %s: %w", x.Binary, err), ExitCode: -1}
	}
	waitErr := waitGroup(ctx, cmd, a.KillGrace, nil)
	res := Result{ExitCode: exitCode(waitErr)}
	res.TimedOut, res.Interrupted = endCause(ctx)
	var ans isolatedResult
	decodeErr := json.Unmarshal(stdout.Bytes(), &ans)
	switch {
	case res.TimedOut:
		res.Err = fmt.Errorf("timed out after %s: the isolated Lua process was killed", a.Step.Timeout)
	case res.Interrupted:
		res.Err = errors.New("interrupted: apollo was asked to stop; the isolated Lua process was killed")
	case decodeErr != nil:
		why := describeExit(waitErr)
		if waitErr == nil {
			why = "no answer"
		}
		res.Err = fmt.Errorf("the isolated Lua process died (%s) with its memory limit at %d MiB: %s",
			why, mem, textfmt.OneLine(lastText(stderr.Bytes(), 400), 400))
		if res.ExitCode == 0 {
			res.ExitCode = -1
		}
	case ans.Err != "":
		res.Err = errors.New(ans.Err)
		res.TimedOut, res.Note = ans.TimedOut, ans.Note
	default:
		res.OutputDigest, res.Output, res.Note = ans.OutputDigest, ans.Output, ans.Note
	}
	return res
}

func lastText(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(bytes.TrimSpace(b))
}

// RunIsolatedChild is the child's side: it reads a job from stdin, runs the
// Lua attempt in this process under a hard memory limit, and writes the
// result to stdout. Markers go straight to the task's log.
func RunIsolatedChild(ctx context.Context, stdin io.Reader, stdout io.Writer, bundled fs.FS) error {
	var job isolatedJob
	if err := json.NewDecoder(stdin).Decode(&job); err != nil {
		return fmt.Errorf("%s: read the job: %w", IsolatedCommand, err)
	}
	limit := uint64(job.MemoryMB) << 20
	// The runtime needs some room beyond the script's data; the soft limit
	// makes the GC work hard first.
	debug.SetMemoryLimit(int64(limit))
	if err := limitData(limit + 192<<20); err != nil {
		return fmt.Errorf("%s: set the memory limit: %w", IsolatedCommand, err)
	}
	step := job.Pipeline.Step(job.StepID)
	if step == nil {
		return fmt.Errorf("%s: no step %q in the job", IsolatedCommand, job.StepID)
	}
	book := markers.New(nil)
	w, err := eventlog.Open(job.LogPath, eventlog.WriterOptions{TaskID: job.TaskID, Durability: eventlog.Always,
		OnForeign: book.Observe}, func(r *eventlog.Record) error { book.Observe(r); return nil })
	if err != nil {
		return err
	}
	defer w.Close()
	book.Attach(w, nil)
	a := &Attempt{TaskID: job.TaskID, StepID: job.StepID, RetryCount: job.RetryCount, Step: step,
		Dir: job.Dir, OutputPath: job.OutputPath, OutputLimit: job.OutputLimit, Started: func(int) error { return nil },
		Pipeline: job.Pipeline, Cleanup: job.Cleanup, InputDigest: job.InputDigest, Vars: job.Vars,
		Params: job.Params, Upstream: job.Upstream, ArtifactsDir: job.ArtifactsDir, StateDir: job.StateDir,
		Markers: book, Failed: job.Failed, Secrets: job.Secrets, Mask: textfmt.NewMasker(job.MaskValues...)}
	x := &Lua{Bundled: bundled, Workdir: job.Dir}
	res := x.Run(ctx, a)
	ans := isolatedResult{OutputDigest: res.OutputDigest, Output: res.Output, TimedOut: res.TimedOut, Note: res.Note}
	if res.Err != nil {
		ans.Err = res.Err.Error()
	}
	return json.NewEncoder(stdout).Encode(ans)
}
