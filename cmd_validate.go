package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"apollo/engine"
	"apollo/engine/completion"
)

func validateCommand() *command[*validateOptions] {
	return &command[*validateOptions]{
		about: about{name: "validate", exitCodes: validateExitCodes, summary: "check a pipeline file without running it",
			usage:   "apollo validate PIPELINE.yaml [--var k=v]...",
			example: "  apollo validate scripts/examples/daily_data_pipeline.yaml",
			argKind: completion.ArgPipeline},
		nargs: positional{1, 1, "expected one pipeline file"},
		flags: newValidateOptions,
		run:   runValidate,
	}
}

// validateOptions are the flags of apollo validate.
type validateOptions struct {
	vars []string
}

// newValidateOptions returns apollo validate's options, bound to the flags it adds to fs.
func newValidateOptions(fs *pflag.FlagSet) *validateOptions {
	o := new(validateOptions)
	varsFlag(fs, &o.vars)
	return o
}

// runValidate loads the pipeline in.args[0] and plans its task, running
// nothing.
func runValidate(_ context.Context, o *validateOptions, in invocation) error {
	vm, err := parseVars(o.vars)
	if err != nil {
		return err
	}
	e := newEngine(stateDirDefault(), engine.ProgressQuiet, in.stdout, in.stderr, nil)
	pl, err := e.Plan(in.args[0], engine.RunOptions{Vars: vm})
	if err != nil {
		return err
	}
	fmt.Fprintf(in.stdout, "%s: ok: %d steps, task %s\n", in.args[0], len(pl.Steps), pl.TaskID)
	for _, tr := range pl.Triggers {
		fmt.Fprintf(in.stdout, "  trigger: %s\n", tr)
	}
	return nil
}

// validateExitCodes is apollo validate's exit code table.
const validateExitCodes = `Exit codes:
  0    the pipeline is valid
  2    the pipeline has problems (each printed with its file and line), or a usage error
`
