package main

import (
	"context"
	"io"

	"github.com/spf13/pflag"

	"apollo/engine"
)

func cmdCompletion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("completion")
	fs := newFlags(c, stdout)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &engine.UsageError{Msg: "completion: expected a shell: bash, zsh or fish\nUsage: " + c.usage}
	}
	return engine.WriteCompletion(stdout, fs.Arg(0), completionCommands(commands()))
}

// completionCommands describes cmds, with their flags, for shell completion.
func completionCommands(cmds []*command) []engine.CompletionCommand {
	var out []engine.CompletionCommand
	for _, c := range cmds {
		cc := engine.CompletionCommand{Name: c.name, Summary: c.summary, Args: c.args}
		fs := newFlags(c, io.Discard)
		if c.flags != nil {
			c.flags(fs)
		}
		fs.VisitAll(func(f *pflag.Flag) { cc.Flags = append(cc.Flags, completionFlag(f)) })
		out = append(out, cc)
	}
	return out
}

// completionFlag says what a flag's value is, for shell completion.
func completionFlag(f *pflag.Flag) engine.CompletionFlag {
	cf := engine.CompletionFlag{Name: f.Name, Short: f.Shorthand, Usage: f.Usage, Value: engine.ValueAny}
	switch {
	case f.Value.Type() == "bool":
		cf.Value = engine.ValueNone
	case f.Name == "state-dir" || f.Name == "archive":
		cf.Value = engine.ValueDir
	case f.Name == "task-id":
		cf.Value = engine.ValueTask
	case f.Name == "format":
		cf.Values = []string{engine.GraphDOT, engine.GraphMermaid}
	case f.Name == "progress":
		cf.Values = []string{engine.ProgressAuto, engine.ProgressBoard, engine.ProgressPlain, engine.ProgressQuiet}
	case f.Name == "older-than":
		cf.Values = []string{"30d", "7d", "1d", "12h"}
	}
	return cf
}
