package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"apollo/engine/completion"
	"apollo/engine/history"
	"apollo/engine/pipeline"
	"apollo/engine/usage"
)

func graphCommand() *command[*graphOptions] {
	return &command[*graphOptions]{
		about: about{name: "graph", summary: "draw a pipeline's DAG (Graphviz DOT or Mermaid), coloured by a task's state",
			usage:   "apollo graph PIPELINE.yaml [--task-id ID] [--format dot|mermaid] [--var k=v]... [--state-dir DIR]",
			example: "  apollo graph scripts/examples/daily_data_pipeline.yaml | dot -Tsvg > dag.svg\n  apollo graph pipeline.yaml --task-id daily_data_pipeline-2026-12-03 --format mermaid",
			argKind: completion.ArgPipeline},
		nargs: positional{1, 1, "expected one pipeline file"},
		flags: newGraphOptions,
		run:   runGraph,
	}
}

// graphOptions are the flags of apollo graph.
type graphOptions struct {
	taskID   string
	format   string
	vars     []string
	stateDir string
}

// newGraphOptions returns apollo graph's options, bound to the flags it adds to fs.
func newGraphOptions(fs *pflag.FlagSet) *graphOptions {
	o := new(graphOptions)
	fs.StringVar(&o.taskID, "task-id", "", "colour each step by its state in this task's latest log")
	fs.StringVar(&o.format, "format", history.GraphDOT, "output format: dot (Graphviz) or mermaid")
	varsFlag(fs, &o.vars)
	stateDirFlag(fs, &o.stateDir)
	return o
}

// runGraph prints the DAG of the pipeline in.args[0] in o.format.
func runGraph(_ context.Context, o *graphOptions, in invocation) error {
	write := history.WriteDOT
	switch o.format {
	case history.GraphDOT:
	case history.GraphMermaid:
		write = history.WriteMermaid
	default:
		msg := fmt.Sprintf("graph: --format %q: expected dot or mermaid", o.format)
		if s := pipeline.Suggest(o.format, []string{history.GraphDOT, history.GraphMermaid}); s != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", s)
		}
		return &usage.Error{Msg: msg}
	}
	vars, err := parseVars(o.vars)
	if err != nil {
		return err
	}
	g, err := runsIn(o.stateDir, in).Graph(in.args[0], history.GraphOptions{TaskID: o.taskID, Vars: vars})
	if err != nil {
		return err
	}
	return write(in.stdout, g)
}
