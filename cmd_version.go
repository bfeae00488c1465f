package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

func cmdVersion(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("version")
	fs := newFlags(c, stdout)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "apollo %s\n", version())
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
