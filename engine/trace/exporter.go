package trace

import (
	"context"
	"os"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newExporter is the OTLP exporter cfg asks for. The endpoint, headers,
// TLS and timeout come from the OTEL_EXPORTER_OTLP_* variables, which the
// exporter reads; apollo sets what makes it never hold a run: no retries
// (a failed export's spans are dropped) and a short timeout when none is
// given.
func newExporter(ctx context.Context, cfg Config) (sdktrace.SpanExporter, error) {
	timeout := os.Getenv(envTimeout) == "" && os.Getenv(envTracesTimeout) == ""
	if cfg.Protocol == ProtocolGRPC {
		return newGRPCExporter(ctx, timeout)
	}
	opts := []otlptracehttp.Option{otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false})}
	if timeout {
		opts = append(opts, otlptracehttp.WithTimeout(exportTimeout))
	}
	return otlptracehttp.New(ctx, opts...)
}
