package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"apollo/engine"
)

type graphOptions struct {
	pipeline string // the argument
	taskID   string
	format   string
	vars     []string
	stateDir string
}

func (o *graphOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.taskID, "task-id", "", "colour each step by its state in this task's latest log")
	fs.StringVar(&o.format, "format", engine.GraphDOT, "output format: dot (Graphviz) or mermaid")
	fs.StringArrayVar(&o.vars, "var", nil, "set a template variable (repeatable): --var k=v")
	stateDirFlag(fs, &o.stateDir)
}

func cmdGraph(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("graph")
	var o graphOptions
	fs := newFlags(c, stdout)
	o.addFlags(fs)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &engine.UsageError{Msg: "graph: expected one pipeline file\nUsage: " + c.usage}
	}
	o.pipeline = fs.Arg(0)
	return runGraph(ctx, o, stdout, stderr)
}

// runGraph prints the DAG of o.pipeline in o.format.
func runGraph(ctx context.Context, o graphOptions, stdout, stderr io.Writer) error {
	write := engine.WriteDOT
	switch o.format {
	case engine.GraphDOT:
	case engine.GraphMermaid:
		write = engine.WriteMermaid
	default:
		msg := fmt.Sprintf("graph: --format %q: expected dot or mermaid", o.format)
		if s := engine.Suggest(o.format, []string{engine.GraphDOT, engine.GraphMermaid}); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return &engine.UsageError{Msg: msg}
	}
	vars, err := parseVars(o.vars)
	if err != nil {
		return err
	}
	e := newEngine(o.stateDir, engine.ProgressQuiet, stdout, stderr)
	g, err := e.Graph(o.pipeline, engine.GraphOptions{TaskID: o.taskID, Vars: vars})
	if err != nil {
		return err
	}
	return write(stdout, g)
}
