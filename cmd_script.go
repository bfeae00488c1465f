package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"

	"apollo/engine"
)

type scriptOptions struct {
	taskID   string
	stateDir string
}

func (o *scriptOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.taskID, "task-id", "", "the task whose log the script reads and amends (required)")
	stateDirFlag(fs, &o.stateDir)
}

func cmdScript(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("script")
	var o scriptOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() < 1 {
		return &engine.UsageError{Msg: "script: expected a Lua file\nUsage: " + c.usage}
	}
	if o.taskID == "" {
		return &engine.UsageError{Msg: "script: --task-id is required: name the task the script works on"}
	}
	e := newEngine(o.stateDir, engine.ProgressQuiet, stdout, stderr)
	return e.Script(ctx, fs.Arg(0), engine.ScriptOptions{TaskID: o.taskID, Args: fs.Args()[1:]})
}
