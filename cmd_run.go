package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"apollo/engine"
	"apollo/engine/completion"
	"apollo/engine/remote"
	"apollo/engine/trace"
	"apollo/engine/usage"
)

func runCommand() *command[*runOptions] {
	return &command[*runOptions]{
		about: about{name: "run", exitCodes: exitCodeTable, summary: "run or resume the task of a pipeline",
			usage:   "apollo run PIPELINE.yaml [flags]",
			example: "  apollo run scripts/examples/daily_data_pipeline.yaml --var region=eu\n  apollo run pipeline.yaml --dry-run --json\n  apollo run pipeline.yaml --resume-from transform\n  apollo run pipeline.yaml --hub nats://10.0.0.1:4222,nats://10.0.0.2:4222 --token-file hub.token\n  apollo run pipeline.yaml --dates 2026-11-01..2026-11-30   # a backfill: one task per date",
			json:    engine.PlanJSONDoc, argKind: completion.ArgPipeline},
		nargs: positional{1, 1, "expected one pipeline file"},
		flags: newRunOptions,
		run:   runRun,
	}
}

// runOptions are the flags of apollo run.
type runOptions struct {
	vars          []string
	taskID        string
	fresh         bool
	resumeFrom    string
	only, until   string
	acceptChanges bool
	dryRun        bool
	json          bool
	parallel      int
	stateDir      string
	quiet         bool
	progress      string
	hub           hubFlags
	pool          string
	dates         string
	noCache       bool
}

// newRunOptions returns apollo run's options, bound to the flags it adds to fs.
func newRunOptions(fs *pflag.FlagSet) *runOptions {
	o := new(runOptions)
	varsFlag(fs, &o.vars)
	fs.StringVar(&o.taskID, "task-id", "", "name the task run (default <task_name>-<task_date>)")
	fs.BoolVar(&o.fresh, "fresh", false, "start a new log for the task instead of resuming")
	fs.StringVar(&o.resumeFrom, "resume-from", "", "run STEP and its descendants again; skip other unfinished steps")
	fs.StringVar(&o.only, "only", "", "run STEP alone (again, if it succeeded); leave every other step as it is")
	fs.StringVar(&o.until, "until", "", "run STEP and the steps it depends on that are not done yet; leave the rest as it is")
	fs.BoolVar(&o.acceptChanges, "accept-changes", false, "keep the results of succeeded steps whose definition changed, and take the pipeline file at a new path for the task's, moved")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the plan (keep / clean+rerun / rerun / skip) and write nothing")
	fs.BoolVar(&o.json, "json", false, "with --dry-run: print the plan as JSON")
	fs.IntVar(&o.parallel, "parallel", 0, "most steps running at once (default: the pipeline's parallelism, else CPU count)")
	stateDirFlag(fs, &o.stateDir)
	fs.BoolVarP(&o.quiet, "quiet", "q", false, "print nothing but errors")
	fs.StringVar(&o.progress, "progress", engine.ProgressAuto, "progress display: auto, board, plain or quiet")
	o.hub.addFlags(fs, "run the steps on workers through this hub: nats://host:port[,nats://host:port...]")
	fs.StringVar(&o.pool, "pool", "", "with --hub: the pool of steps that name none (default \"default\")")
	fs.BoolVar(&o.noCache, "no-cache", false, "run steps with cache: instead of taking their results from the cache (their new results are saved)")
	fs.StringVar(&o.dates, "dates", "", "backfill: run the task of each date, oldest first (FROM..TO, or dates and ranges joined by commas)")
	return o
}

// runRun runs or resumes the task of the pipeline in.args[0], or prints
// its plan with --dry-run.
func runRun(ctx context.Context, o *runOptions, in invocation) error {
	if o.json && !o.dryRun {
		return &usage.Error{Msg: "run: --json goes with --dry-run"}
	}
	if o.fresh && o.resumeFrom != "" {
		return &usage.Error{Msg: "run: --fresh and --resume-from do not go together: a fresh run has nothing to resume"}
	}
	// 0 is the flag's "unset" value; given explicitly it would mean "run
	// nothing at once", which no one means.
	if in.changed("parallel") && o.parallel < 1 {
		return &usage.Error{Msg: fmt.Sprintf("run: --parallel %d: must be at least 1 (leave it out to use the pipeline's parallelism)", o.parallel)}
	}
	switch o.progress {
	case engine.ProgressAuto, engine.ProgressBoard, engine.ProgressPlain, engine.ProgressQuiet:
	default:
		return &usage.Error{Msg: fmt.Sprintf("run: --progress %q: expected auto, board, plain or quiet", o.progress)}
	}
	if o.quiet {
		o.progress = engine.ProgressQuiet
	}
	if o.hub.urls == "" && (o.pool != "" || o.hub.auth() != (remote.Auth{})) {
		return &usage.Error{Msg: "run: --pool and the hub's credentials go with --hub"}
	}
	if o.pool != "" && !remote.ValidPool(o.pool) {
		return &usage.Error{Msg: fmt.Sprintf("run: --pool %q: a pool name is letters, digits, _ and -", o.pool)}
	}
	vars, err := parseVars(o.vars)
	if err != nil {
		return err
	}
	var tracer *trace.Tracer
	if !o.dryRun {
		tracer = newTracer(ctx, in.stderr)
		defer tracer.Shutdown()
	}
	e := newEngine(o.stateDir, o.progress, in.stdout, in.stderr, tracer)
	ro := engine.RunOptions{Vars: vars, TaskID: o.taskID, Fresh: o.fresh,
		ResumeFrom: o.resumeFrom, Only: o.only, Until: o.until, AcceptChanges: o.acceptChanges, Parallel: o.parallel, DryRun: o.dryRun, JSON: o.json, NoCache: o.noCache,
		Hub: engine.HubOptions{URLs: o.hub.urls, Pool: o.pool, Auth: o.hub.auth(),
			CallTimeout: envDuration(envHubCallTimeout), GiveUp: envDuration(envHubGiveUp), LeaseTTL: envDuration(envHubLeaseTTL),
			Untaken: envDuration(envHubUntaken)}}
	if in.changed("dates") {
		return runDates(ctx, e, in, o, ro)
	}
	return e.Run(ctx, in.args[0], ro)
}
