package main

import (
	"context"

	"github.com/spf13/pflag"

	"apollo/engine/completion"
	"apollo/engine/recovery"
	"apollo/engine/usage"
	"apollo/scripts"
)

func scriptCommand() *command[*scriptOptions] {
	return &command[*scriptOptions]{
		about: about{name: "script", exitCodes: scriptExitCodes, summary: "run a recovery script (Lua, with apollo.state) against a task's log",
			usage:   "apollo script RECOVERY.lua --task-id ID [--state-dir DIR] [-- args...]",
			example: "  apollo script fix.lua --task-id daily_data_pipeline-2026-12-03 -- transform\n  # fix.lua: require(\"apollo.state\").reset(arg[1], \"input corrected by hand\")",
			argKind: completion.ArgLua},
		nargs: positional{1, -1, "expected a Lua file"},
		flags: newScriptOptions,
		run:   runScript,
	}
}

// scriptOptions are the flags of apollo script.
type scriptOptions struct {
	taskID   string
	stateDir string
}

// newScriptOptions returns apollo script's options, bound to the flags it adds to fs.
func newScriptOptions(fs *pflag.FlagSet) *scriptOptions {
	o := new(scriptOptions)
	fs.StringVar(&o.taskID, "task-id", "", "the task whose log the script reads and amends (required)")
	stateDirFlag(fs, &o.stateDir)
	return o
}

// runScript runs the recovery script in.args[0] against o.taskID's log,
// with the rest of in.args as its arguments.
func runScript(ctx context.Context, o *scriptOptions, in invocation) error {
	if o.taskID == "" {
		return &usage.Error{Msg: "script: --task-id is required: name the task the script works on"}
	}
	return recovery.Run(ctx, in.args[0], recovery.Options{TaskID: o.taskID, Args: in.args[1:],
		StateDir: o.stateDir, Stdout: in.stdout, Bundled: scripts.Modules()})
}

// scriptExitCodes is apollo script's exit code table.
const scriptExitCodes = `Exit codes:
  0    the script ran to its end
  1    the script does not compile or raised an error, or the log could not be read or written
  2    a usage error, or an unknown task id; nothing was written
`
