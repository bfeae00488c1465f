package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"apollo/engine/trace"
)

// newTracer is the tracer the OTEL_* variables ask for (docs/spec.md
// §5.16), nil when they ask for none: then nothing of the OpenTelemetry SDK
// is built. A tracer that cannot be built is said on stderr; the run goes
// on without traces.
func newTracer(ctx context.Context, stderr io.Writer) *trace.Tracer {
	cfg, ok := trace.FromEnv(os.Getenv, version(), stderr)
	if !ok {
		return nil
	}
	t, err := trace.New(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "apollo: %v; no traces are exported\n", err)
		return nil
	}
	return t
}
