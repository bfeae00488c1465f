package trace

import (
	"context"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// newGRPCExporter is the OTLP/gRPC exporter (OTEL_EXPORTER_OTLP_PROTOCOL=grpc).
func newGRPCExporter(ctx context.Context, timeout bool) (sdktrace.SpanExporter, error) {
	opts := []otlptracegrpc.Option{otlptracegrpc.WithRetry(otlptracegrpc.RetryConfig{Enabled: false})}
	if timeout {
		opts = append(opts, otlptracegrpc.WithTimeout(exportTimeout))
	}
	return otlptracegrpc.New(ctx, opts...)
}
