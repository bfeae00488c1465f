// Package trace exports a run's OpenTelemetry spans over OTLP (docs/spec.md
// §5.16): configured by the standard OTEL_* variables, off when none asks for
// it, and then nothing of the SDK is built. A *Tracer and a *Span that are
// nil do nothing, so the engine calls them the same way with tracing on or
// off.
//
// Spans never slow a run: they are queued (bounded, dropped when full) and
// exported by a batch processor in the background, each export bounded in
// time, without retries; Shutdown gives the last export a bounded time.
//
// A span's id can be chosen before the span starts (NewSpanID, Start.SpanID):
// the TRACEPARENT given to a step, which may be started ahead, names the
// span that its attempt is.
package trace
