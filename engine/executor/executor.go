package executor

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"apollo/engine/pipeline"
	"apollo/engine/textfmt"
	"apollo/luart"
	"apollo/stdlib"
)

// Attempt is one execution of a step body (or of a cleanup hook) as an
// executor sees it.
type Attempt struct {
	TaskID     string
	StepID     string
	RetryCount int
	// Step is the step's definition; Command is its rendered shell body (or
	// rendered cleanup command) and Env its full environment.
	Step    *pipeline.Step
	Command string
	Env     []string
	// Dir is the workspace, where bodies run.
	Dir string
	// OutputPath receives the attempt's stdout and stderr, at most
	// OutputLimit bytes of them (no limit when 0).
	OutputPath  string
	OutputLimit int64
	// PublishPath is the file a shell body may write key=value lines to
	// ($APOLLO_OUTPUT); empty for cleanups.
	PublishPath string
	// Started is called once the body's process exists, before the body may
	// run; the body runs only if it returns nil. pgid names the process
	// group (0 when the body runs inside apollo). A Lua body runs while
	// Started does, and its effects (print, apollo.* but apollo.json) wait
	// for it: they happen only if it returned nil.
	Started func(pgid int) error
	// Running, when set, is called once a process body has been released
	// (pgid > 0), for bookkeeping that must not delay the body.
	Running func(pgid int)
	// Direct lets a shell body that is one plain command run without a
	// shell (directCommand): Started(0) is then called before its process
	// exists, and until Running names its group the caller finds it by its
	// AttemptEnv tag; a caller that tracks bodies by their group alone
	// leaves it false.
	Direct bool
	// KillGrace is how long a process group has between SIGTERM and SIGKILL.
	KillGrace time.Duration

	// What a Lua body sees as ctx and uses through apollo.*.
	Pipeline     *pipeline.Pipeline
	Cleanup      bool // the attempt is the step's cleanup hook
	InputDigest  string
	Vars         map[string]string
	Params       map[string]any
	Upstream     map[string]json.RawMessage
	ArtifactsDir string
	StateDir     string
	Markers      MarkerStore
	// Secrets are the task's secrets by name (ctx.secrets for Lua; a shell
	// body has them in Env), and Mask masks them and the secret vars in
	// what the attempt writes to its output file; nil when there are none.
	Secrets map[string]string
	Mask    *textfmt.Masker
	// Failed are the task's failed steps, for a handler (on_failure,
	// finally) once the task failed; nil otherwise.
	Failed []FailedStep
	// Sources are the Lua files the step loads, read once for the run
	// (Lua.Gather): a Lua attempt runs these, not the files as they are
	// now. Nil reads the files when the attempt loads them.
	Sources luart.Sources
}

// FailedStep is a step that failed, as a handler is told of it.
type FailedStep struct {
	ID       string `json:"id"`
	Error    string `json:"error"`
	Optional bool   `json:"optional,omitempty"`
}

// MarkerStore keeps a task's idempotency markers in its event log.
type MarkerStore interface {
	Marker(name string) (stdlib.Marker, bool)
	// RecordMarker appends a MARKER record for step and returns once it is
	// durable.
	RecordMarker(step string, retry int, m stdlib.Marker) error
}

// Result is how an attempt ended.
type Result struct {
	// Err says why the attempt failed; nil on success.
	Err error
	// ExitCode of a process body; -1 when it was killed by a signal.
	ExitCode int
	// OutputDigest is sha256 of the attempt's output: stdout for a shell
	// body, the returned value for Lua.
	OutputDigest string
	// Output is the published value (JSON), or nil.
	Output json.RawMessage
	// TimedOut and Interrupted say how a cancelled attempt was ended.
	TimedOut    bool
	Interrupted bool
	// NotStarted is set when Started refused: the body never ran.
	NotStarted bool
	// Note is what the STEP_END's message tells besides the outcome (an
	// output cut at its limit), or "".
	Note string
}

// Executor runs attempts of one kind of body. The engine picks an executor
// per step; a remote executor would implement the same interface.
type Executor interface {
	Run(ctx context.Context, a *Attempt) Result
}

// AheadStarter is an Executor that can start an attempt's process before
// the attempt's turn, held before its body: the engine starts a step's
// process while the last of its dependencies still runs (see Shell).
type AheadStarter interface {
	Executor
	StartAhead(a *Attempt) (Ahead, error)
}

// Ahead is an attempt whose process was started ahead of its turn, held
// before its body.
type Ahead interface {
	// Attempt is the attempt it was started for; the engine completes it
	// (Upstream, InputDigest, Started, Running) before Run.
	Attempt() *Attempt
	// Usable reports whether it can still run its attempt: false when the
	// workspace folder it was started in has been replaced since.
	Usable() bool
	// Run runs the attempt's body as Executor.Run would.
	Run(ctx context.Context) Result
	// Close ends it without running its body, unless Run was called.
	Close()
}

// errTimeout is the cause of an attempt's context when its timeout expires.
var errTimeout = errors.New("timeout")

// WithTimeout returns the context of an attempt with a timeout (none when
// timeout is 0): an executor that sees it end reports the attempt as timed
// out rather than interrupted.
func WithTimeout(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout > 0 {
		return context.WithTimeoutCause(ctx, timeout, errTimeout)
	}
	return context.WithCancel(ctx)
}

// endCause classifies why ctx ended for an attempt.
func endCause(ctx context.Context) (timedOut, interrupted bool) {
	if ctx.Err() == nil {
		return false, false
	}
	if errors.Is(context.Cause(ctx), errTimeout) {
		return true, false
	}
	return false, true
}
