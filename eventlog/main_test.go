package eventlog_test

import (
	"apollo/engine/executor"
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// TestMain lets the test binary serve as the Lua workers of the engines the
// tests make (they start os.Executable with engine.IsolatedCommand), as
// apollo's main does (TestPowerLoss runs a Lua step).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == executor.IsolatedCommand {
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
		err := executor.RunIsolatedChild(ctx, os.Stdin, os.Stdout, nil)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}
