package engine

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"apollo/engine/clock"
	"apollo/engine/container"
	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/engine/progress"
	"apollo/engine/trace"
	"apollo/eventlog"
)

// Options configure an Engine. The zero value of each field has a sensible
// default, set by New.
type Options struct {
	// StateDir holds logs, locks, artifacts and outputs (docs/spec.md §3).
	StateDir string
	// Workdir is the workspace where step bodies run.
	Workdir string
	// Stdout receives progress and results; Stderr warnings.
	Stdout, Stderr io.Writer
	// Clock is the engine's time: timestamps, retry delays, the progress
	// board. nil means the system clock.
	Clock clock.Clock
	// Progress is one of the Progress* modes; Color allows ANSI colours.
	Progress string
	Color    bool
	// KillGrace is the time between SIGTERM and SIGKILL when a step's
	// process group is ended.
	KillGrace time.Duration
	// MaxOutputBytes is the most an attempt's output file keeps
	// (executor.DefaultMaxOutput when 0; no limit when negative).
	MaxOutputBytes int64
	// Version is apollo's version, written into TASK_START.
	Version string
	// Bundled holds the bundled Lua step modules (scripts/).
	Bundled fs.FS
	// FS is the file-system seam of the event log; nil means the real one.
	FS eventlog.FS
	// Executors run bodies by kind ("shell", "lua"); missing kinds get the
	// built-in ones.
	Executors map[string]executor.Executor
	// Crash is called at named crash points (see crash.go); nil means the
	// one APOLLO_CRASH_AT asks for, if any.
	Crash func(point string)
	// Container is how this machine runs container steps (container.go).
	Container container.Config
	// Tracer exports the spans of runs (tracing.go); nil exports none.
	Tracer *trace.Tracer
	// Notify bounds the delivery of notifications (notify.go).
	Notify NotifyOptions
}

// Engine loads pipelines and runs, plans and inspects tasks.
type Engine struct {
	opts Options
}

// New returns an Engine with opts, defaults filled in.
func New(opts Options) *Engine {
	if opts.StateDir == "" {
		opts.StateDir = ".apollo"
	}
	if opts.Workdir == "" {
		opts.Workdir, _ = os.Getwd()
	}
	if opts.Stdout == nil {
		opts.Stdout = io.Discard
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Progress == "" {
		opts.Progress = ProgressAuto
	}
	if opts.KillGrace == 0 {
		opts.KillGrace = 5 * time.Second
	}
	if opts.MaxOutputBytes == 0 {
		opts.MaxOutputBytes = executor.DefaultMaxOutput
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	ex := map[string]executor.Executor{"shell": executor.Shell{}, "lua": &executor.Lua{Bundled: opts.Bundled, Workdir: opts.Workdir}}
	for k, v := range opts.Executors {
		ex[k] = v
	}
	opts.Executors = ex
	opts.Notify = notifyDefaults(opts.Notify)
	if opts.Crash == nil {
		opts.Crash = crashHook(os.Getenv(crashAtEnv), os.Getenv(crashTraceEnv))
	}
	return &Engine{opts: opts}
}

// loadOptions are the LoadOptions of a run, plan or validation: references
// checked the way this engine's executors resolve them.
func (e *Engine) loadOptions(vars map[string]string) pipeline.LoadOptions {
	return pipeline.LoadOptions{Vars: vars, CheckRefs: true, Workdir: e.opts.Workdir, Bundled: e.opts.Bundled}
}

// RunOptions are the flags of one apollo run.
type RunOptions struct {
	Vars       map[string]string
	TaskID     string
	Fresh      bool
	ResumeFrom string
	// Only runs that step alone; Until runs that step and the steps it
	// depends on, as needed. Other steps are left as they are.
	Only, Until   string
	AcceptChanges bool
	Parallel      int
	DryRun        bool
	JSON          bool
	// NoCache runs cached steps instead of taking their results from the
	// cache; their new results are saved.
	NoCache bool
	// Hub, when its URLs are set, runs the steps on workers (docs/spec.md §8).
	Hub HubOptions

	// inherited are the variables of the task whose run: step runs this
	// one: those the pipeline declares are set, under Vars (its with:).
	inherited map[string]string
	// secretVars are variables that hold a secret of that task: secret
	// vars of this one too.
	secretVars []string
	// log is the log of a sub-pipeline's task that its parent's attempt
	// names (childLog): resumed when it exists, else created.
	log string
}

// ChangedError refuses to resume a task whose succeeded steps changed, or
// whose log holds attempts cut off by a crash of steps the pipeline no
// longer has (renamed or removed since), which no run would clean up
// after.
type ChangedError struct {
	TaskID string
	Steps  []string
	// Gone are the dirty steps the pipeline no longer has; Remote says
	// they were dispatched to a hub, whose workers apollo cannot end from
	// here, so --accept-changes does not let the run go on.
	Gone   []string
	Remote bool
}

func (e *ChangedError) Error() string {
	var parts []string
	if len(e.Steps) > 0 {
		parts = append(parts, fmt.Sprintf("the definition of step(s) %v changed since they succeeded; "+
			"rerun with --accept-changes to keep their results, --resume-from STEP to run them again, "+
			"or --fresh to start the task over", e.Steps))
	}
	switch {
	case len(e.Gone) > 0 && e.Remote:
		parts = append(parts, fmt.Sprintf("step(s) %v were cut off while a hub's worker ran them, and the pipeline no "+
			"longer has them, so no run would reclaim and clean up after them; put them back in the pipeline and "+
			"run again (--accept-changes cannot end what a worker runs)", e.Gone))
	case len(e.Gone) > 0:
		parts = append(parts, fmt.Sprintf("step(s) %v were cut off by a crash (dirty in the log) and the pipeline no "+
			"longer has them, so no run would clean up after them; put them back in the pipeline and run again, "+
			"so that the processes they left are ended and their cleanup runs, or rerun with --accept-changes to "+
			"end those processes and go on without their cleanup", e.Gone))
	}
	return "task " + e.TaskID + ": " + strings.Join(parts, "; and ")
}

// TaskFailedError says the task ended with required steps failed, and the
// steps they blocked.
type TaskFailedError struct {
	TaskID  string
	Failed  []string
	Blocked []string
}

// Error reads "task t failed at step a; blocked: b, c" ("at steps a, d"
// for several; "did not complete: blocked: ..." when none failed).
func (e *TaskFailedError) Error() string {
	msg := "task " + e.TaskID
	switch len(e.Failed) {
	case 0:
		msg += " did not complete"
	case 1:
		msg += " failed at step " + e.Failed[0]
	default:
		msg += " failed at steps " + nameList(e.Failed)
	}
	if len(e.Blocked) == 0 {
		return msg
	}
	sep := "; "
	if len(e.Failed) == 0 {
		sep = ": "
	}
	return msg + sep + "blocked: " + nameList(e.Blocked)
}

// maxNames is the most step ids one line of an error names.
const maxNames = 20

// nameList joins ids with commas, the first maxNames of them: the summary
// above the line names every one.
func nameList(ids []string) string {
	if len(ids) <= maxNames {
		return strings.Join(ids, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(ids[:maxNames], ", "), len(ids)-maxNames)
}

// InterruptedError says the run was stopped by SIGINT or SIGTERM.
type InterruptedError struct{ TaskID string }

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("task %s interrupted; run the same command again to resume", e.TaskID)
}

func (e *Engine) parallelism(p *pipeline.Pipeline, flag int) int {
	switch {
	case flag > 0:
		return flag
	case p.Parallelism > 0:
		return p.Parallelism
	default:
		return runtime.NumCPU()
	}
}

// absPath is p made absolute, or p when it cannot be.
func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// The progress modes of Options.Progress: how apollo run shows a run
// (package progress).
const (
	ProgressAuto  = progress.Auto
	ProgressPlain = progress.Plain
	ProgressQuiet = progress.Quiet
	ProgressBoard = progress.Board
)
