package main

import (
	"context"
	"io"

	"apollo/scripts"
)

func cmdLuaTypes(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("lua-types")
	fs := newFlags(c, stdout)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	_, err := stdout.Write(scripts.LuaTypes())
	return err
}
