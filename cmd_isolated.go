package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"apollo/engine/executor"
	"apollo/scripts"
)

// runIsolatedChild is the hidden command executor.IsolatedCommand: the child
// apollo that runs one attempt of a Lua step with isolation: process. It
// reads the attempt from stdin and writes the result to stdout; it is no
// command of the table, for no person types it, and any error is exit 1.
func runIsolatedChild(ctx context.Context, stdout, stderr io.Writer) int {
	if err := executor.RunIsolatedChild(ctx, os.Stdin, stdout, scripts.Modules()); err != nil {
		fmt.Fprintf(stderr, "apollo: %v\n", err)
		return exitFailed
	}
	return exitOK
}
