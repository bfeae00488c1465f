package main

import (
	"context"
	"io"

	"apollo/engine"
)

func cmdSchema(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c := commandNamed("schema")
	fs := newFlags(c, stdout)
	if err := parse(c, fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return &engine.UsageError{Msg: "schema: takes no arguments\nUsage: " + c.usage}
	}
	_, err := stdout.Write(engine.PipelineSchema())
	return err
}
