package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"apollo/engine"
)

type validateOptions struct {
	vars []string
}

func (o *validateOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringArrayVar(&o.vars, "var", nil, "set a template variable (repeatable): --var k=v")
}

func cmdValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("validate")
	var o validateOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &engine.UsageError{Msg: "validate: expected one pipeline file\nUsage: " + c.usage}
	}
	vm, err := parseVars(o.vars)
	if err != nil {
		return err
	}
	e := newEngine(stateDirDefault(), engine.ProgressQuiet, stdout, stderr)
	pl, err := e.Plan(fs.Arg(0), engine.RunOptions{Vars: vm})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok: %d steps, task %s\n", fs.Arg(0), len(pl.Steps), pl.TaskID)
	return nil
}
