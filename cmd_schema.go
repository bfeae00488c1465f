package main

import (
	"context"

	"apollo/engine/pipeline"
)

func schemaCommand() *command[*noOptions] {
	return &command[*noOptions]{
		about: about{name: "schema", exitCodes: simpleExitCodes, summary: "print the JSON Schema of the pipeline format, for editors",
			usage:   "apollo schema > pipeline.schema.json",
			example: "  apollo schema > pipeline.schema.json\n  # then, first line of a pipeline: # yaml-language-server: $schema=./pipeline.schema.json"},
		nargs: positional{0, 0, "takes no arguments"},
		run:   runSchema,
	}
}

// runSchema prints the JSON Schema of the pipeline format.
func runSchema(_ context.Context, _ *noOptions, in invocation) error {
	_, err := in.stdout.Write(pipeline.Schema())
	return err
}
