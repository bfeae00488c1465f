package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"apollo/engine"
)

func graphCommand() *command[graphOptions] {
	return &command[graphOptions]{
		about: about{name: "graph", summary: "draw a pipeline's DAG (Graphviz DOT or Mermaid), coloured by a task's state",
			usage:   "apollo graph PIPELINE.yaml [--task-id ID] [--format dot|mermaid] [--var k=v]... [--state-dir DIR]",
			example: "  apollo graph scripts/examples/daily_data_pipeline.yaml | dot -Tsvg > dag.svg\n  apollo graph pipeline.yaml --task-id daily_data_pipeline-2026-12-03 --format mermaid",
			argKind: engine.ArgPipeline},
		nargs:    positional{1, 1, "expected one pipeline file"},
		addFlags: (*graphOptions).addFlags,
		run:      runGraph,
	}
}

// graphOptions are the flags of apollo graph.
type graphOptions struct {
	taskID   string
	format   string
	vars     []string
	stateDir string
}

func (o *graphOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.taskID, "task-id", "", "colour each step by its state in this task's latest log")
	fs.StringVar(&o.format, "format", engine.GraphDOT, "output format: dot (Graphviz) or mermaid")
	varsFlag(fs, &o.vars)
	stateDirFlag(fs, &o.stateDir)
}

// runGraph prints the DAG of the pipeline in.args[0] in o.format.
func runGraph(_ context.Context, o *graphOptions, in invocation) error {
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
	e := newEngine(o.stateDir, engine.ProgressQuiet, in.stdout, in.stderr)
	g, err := e.Graph(in.args[0], engine.GraphOptions{TaskID: o.taskID, Vars: vars})
	if err != nil {
		return err
	}
	return write(in.stdout, g)
}
