package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/pflag"

	"apollo/engine/pipeline"
	"apollo/engine/usage"
)

// about is what help and shell completion say about a command.
type about struct {
	name    string
	summary string
	usage   string
	example string
	// json documents the command's --json output, shown by --help.
	json string
	// exitCodes is the exit code table --help ends with, in words that fit
	// the command; "" for commonExitCodes.
	exitCodes string
	// argKind is what the positional arguments are (completion.Arg*), and
	// argWords the choices of the first one (completion.ArgWords), for
	// shell completion.
	argKind  string
	argWords []string
}

// positional is how many positional arguments a command takes, from min to
// max (max < 0: no limit), and what to tell someone who gave another count.
type positional struct {
	min, max int
	want     string
}

// check returns a usage error if n arguments are not what c takes.
func (p positional) check(c *about, n int) error {
	if n < p.min || (p.max >= 0 && n > p.max) {
		return &usage.Error{Msg: c.name + ": " + p.want + "\nUsage: " + c.usage}
	}
	return nil
}

// command is a subcommand whose flags fill its options O, a pointer to the
// command's options struct. What every command does before its own work (a
// flag set, --help, flag and argument-count errors) is written once, in
// execute; the methods here are the little that depends on O. O is a
// pointer because Go compiles a generic function once per shape of its
// type arguments and every pointer has the same shape: one copy of them
// serves all the commands, instead of one per options struct.
type command[O any] struct {
	about
	nargs positional
	// flags returns fresh options bound to flags it adds to fs; nil: the
	// command has no options and no flags but --help.
	flags func(fs *pflag.FlagSet) O
	run   func(ctx context.Context, o O, in invocation) error
}

// invocation is what a command's run gets besides its options.
type invocation struct {
	args           []string               // the positional arguments, already counted
	changed        func(flag string) bool // whether flag was on the command line
	stdout, stderr io.Writer
}

// noOptions is the options of a command that has no flags but --help.
type noOptions struct{}

// subcommand is a command[O] of any O, as the command table holds it.
type subcommand interface {
	describe() *about
	// arity is how many positional arguments the command takes.
	arity() positional
	// bind adds the command's flags to fs, bound to fresh options, and
	// returns its work with those options.
	bind(fs *pflag.FlagSet) func(ctx context.Context, in invocation) error
}

func (c *command[O]) describe() *about { return &c.about }

func (c *command[O]) arity() positional { return c.nargs }

func (c *command[O]) bind(fs *pflag.FlagSet) func(ctx context.Context, in invocation) error {
	var o O
	if c.flags != nil {
		o = c.flags(fs)
	}
	return func(ctx context.Context, in invocation) error { return c.run(ctx, o, in) }
}

// execute runs c with the command line args that follow its name.
func execute(ctx context.Context, c subcommand, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(c.describe())
	run := c.bind(fs)
	if err := c.describe().parse(fs, args, stdout); err != nil {
		return err
	}
	if err := c.arity().check(c.describe(), fs.NArg()); err != nil {
		return err
	}
	return run(ctx, invocation{args: fs.Args(), changed: fs.Changed, stdout: stdout, stderr: stderr})
}

// flagsOf returns c's flags bound to fresh options, for shell completion.
func flagsOf(c subcommand) *pflag.FlagSet {
	fs := newFlagSet(c.describe())
	c.bind(fs)
	return fs
}

// newFlagSet returns an empty flag set for the command c with --help. It
// prints nothing: parse reports the errors and prints the help.
func newFlagSet(c *about) *pflag.FlagSet {
	fs := pflag.NewFlagSet(c.name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.BoolP("help", "h", false, "show this help")
	return fs
}

// errHelp is returned when --help was asked for: exit 0, help printed.
var errHelp = errors.New("help requested")

// parse parses args; it prints help and returns errHelp for --help, and
// turns flag errors into usage errors with a suggestion.
func (c *about) parse(fs *pflag.FlagSet, args []string, stdout io.Writer) error {
	if err := fs.Parse(args); err != nil {
		msg := fmt.Sprintf("%s: %v", c.name, err)
		if ne, ok := errors.AsType[*pflag.NotExistError](err); ok && ne.GetSpecifiedShortnames() == "" {
			name := ne.GetSpecifiedName()
			var flags []string
			fs.VisitAll(func(f *pflag.Flag) { flags = append(flags, f.Name) })
			if s := pipeline.Suggest(name, flags); s != "" {
				msg += fmt.Sprintf(" (did you mean --%s?)", s)
			}
		}
		return &usage.Error{Msg: msg + "\nRun 'apollo " + c.name + " --help' for usage."}
	}
	// An empty value given explicitly is most likely an unset shell
	// variable (--task-id "$ID"); taking the default instead would run or
	// show another task, or use another state folder, without a word.
	for _, name := range []string{"task-id", "state-dir"} {
		if f := fs.Lookup(name); f != nil && f.Changed && f.Value.String() == "" {
			return &usage.Error{Msg: fmt.Sprintf("%s: --%s is empty; give a value or leave the flag out", c.name, name)}
		}
	}
	if h, _ := fs.GetBool("help"); h {
		fmt.Fprintf(stdout, "%s\n\nUsage:\n  %s\n\nFlags:\n%s\nExamples:\n%s\n\n", c.summary, c.usage, fs.FlagUsages(), c.example)
		if c.json != "" {
			fmt.Fprintf(stdout, "%s\n", c.json)
		}
		codes := c.exitCodes
		if codes == "" {
			codes = commonExitCodes
		}
		fmt.Fprint(stdout, codes)
		return errHelp
	}
	return nil
}
