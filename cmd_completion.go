package main

import (
	"context"

	"github.com/spf13/pflag"

	"apollo/engine"
	"apollo/engine/completion"
	"apollo/engine/history"
)

func completionCommand() *command[*noOptions] {
	return &command[*noOptions]{
		about: about{name: "completion", exitCodes: simpleExitCodes, summary: "print a shell completion script (bash, zsh or fish)",
			usage:   "apollo completion bash|zsh|fish",
			example: "  source <(apollo completion bash)\n  apollo completion zsh > \"${fpath[1]}/_apollo\"\n  apollo completion fish > ~/.config/fish/completions/apollo.fish",
			argKind: completion.ArgWords, argWords: completion.Shells},
		nargs: positional{1, 1, "expected a shell: bash, zsh or fish"},
		run:   runCompletion,
	}
}

// runCompletion prints the completion script of the shell in.args[0].
func runCompletion(_ context.Context, _ *noOptions, in invocation) error {
	return completion.Write(in.stdout, in.args[0], completionCommands(commands()))
}

// completionCommands describes cmds, with their flags, for shell completion.
func completionCommands(cmds []subcommand) []completion.Command {
	var out []completion.Command
	for _, c := range cmds {
		a := c.describe()
		cc := completion.Command{Name: a.name, Summary: a.summary, Args: a.argKind, Words: a.argWords}
		flagsOf(c).VisitAll(func(f *pflag.Flag) { cc.Flags = append(cc.Flags, completionFlag(f)) })
		out = append(out, cc)
	}
	return out
}

// completionFlag says what a flag's value is, for shell completion.
func completionFlag(f *pflag.Flag) completion.Flag {
	cf := completion.Flag{Name: f.Name, Short: f.Shorthand, Usage: f.Usage, Value: completion.ValueAny}
	switch {
	case f.Value.Type() == "bool":
		cf.Value = completion.ValueNone
	case f.Name == "state-dir" || f.Name == "archive":
		cf.Value = completion.ValueDir
	case f.Name == "task-id":
		cf.Value = completion.ValueTask
	case f.Name == "format":
		cf.Values = []string{history.GraphDOT, history.GraphMermaid}
	case f.Name == "progress":
		cf.Values = []string{engine.ProgressAuto, engine.ProgressBoard, engine.ProgressPlain, engine.ProgressQuiet}
	case f.Name == "older-than":
		cf.Values = []string{"30d", "7d", "1d", "12h"}
	}
	return cf
}
