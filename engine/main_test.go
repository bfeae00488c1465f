package engine

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"apollo/engine/executor"
)

// TestMain lets the test binary serve as the Lua processes of the engines the
// tests make (they start os.Executable with IsolatedCommand), as apollo's
// main does, and as the bare child of BenchmarkLuaStep's floor
// (pipeEchoCommand), and stops the hub cluster the hub scenarios share.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == pipeEchoCommand {
		os.Exit(pipeEcho(os.Stdin, os.Stdout))
	}
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
	code := m.Run()
	if sharedHub.cl != nil {
		sharedHub.cl.StopAll()
	}
	os.Exit(code)
}
