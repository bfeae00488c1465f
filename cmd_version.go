package main

import (
	"context"
	"fmt"
	"runtime/debug"
)

func versionCommand() *command[*noOptions] {
	return &command[*noOptions]{
		about: about{name: "version", exitCodes: simpleExitCodes, summary: "print apollo's version", usage: "apollo version", example: "  apollo version"},
		nargs: positional{0, -1, ""}, // arguments are ignored
		run:   runVersion,
	}
}

// runVersion prints apollo's version.
func runVersion(_ context.Context, _ *noOptions, in invocation) error {
	fmt.Fprintf(in.stdout, "apollo %s\n", version())
	return nil
}

// version is the module version, or the VCS revision of a development build.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "dev"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		v = "dev"
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
	}
	return v + " (" + bi.GoVersion + ")"
}
