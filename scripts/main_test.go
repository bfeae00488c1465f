package scripts_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"apollo/engine/executor"
	"apollo/scripts"
)

// TestMain lets the test binary serve as the Lua processes of the engines the
// tests make (they start os.Executable with engine.IsolatedCommand), as
// apollo's main does, with the same bundled modules.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == executor.IsolatedCommand {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		err := executor.RunIsolatedChild(ctx, os.Stdin, os.Stdout, scripts.Modules())
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
