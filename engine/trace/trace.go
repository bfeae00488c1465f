package trace

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"
)

// The attributes of apollo's spans (docs/spec.md §5.16). Their values never
// hold a secret: the engine masks every text it gives.
const (
	AttrTask       = "apollo.task.id"         // the task id
	AttrTaskName   = "apollo.task.name"       // the pipeline's task name
	AttrPipeline   = "apollo.pipeline"        // the pipeline file
	AttrInvocation = "apollo.invocation"      // the invocation's number in the log, from 1
	AttrStep       = "apollo.step.id"         // the step (a foreach or matrix instance's own id)
	AttrAttempt    = "apollo.attempt"         // the attempt's number, from 0
	AttrStatus     = "apollo.status"          // SUCCESS, FAILED, RETRY, RUNNING (left for the next run), SKIPPED
	AttrExitCode   = "apollo.exit_code"       // a shell body's exit status, when not 0
	AttrCachedFrom = "apollo.cached_from"     // the task whose cached result the attempt took
	AttrWorker     = "apollo.worker"          // the worker (host:pid) that ran the attempt (--hub)
	AttrImage      = "apollo.container.image" // a container step's image, as the step names it
	AttrImageID    = "apollo.container.image_id"
	AttrDirty      = "apollo.cleanup.dirty" // a cleanup after an attempt cut off by a crash
	AttrDelayMS    = "apollo.retry.delay_ms"
	AttrResumed    = "apollo.resumed" // the invocation resumes a log an earlier one wrote
)

// The variables that configure tracing (the OpenTelemetry specification's).
const (
	envExporter       = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envTimeout        = "OTEL_EXPORTER_OTLP_TIMEOUT"
	envTracesTimeout  = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"
	envServiceName    = "OTEL_SERVICE_NAME"
)

// Protocols of OTLP exporters.
const (
	ProtocolHTTP = "http/protobuf"
	ProtocolGRPC = "grpc"
)

// Config is what the environment asks of tracing.
type Config struct {
	// Protocol is ProtocolHTTP or ProtocolGRPC.
	Protocol string
	// Service is the spans' service.name.
	Service string
	// Version is apollo's, their service.version.
	Version string
}

// FromEnv reads the configuration from the OTEL_* variables. ok is false
// when tracing is off: OTEL_TRACES_EXPORTER is none, or no variable asks
// for OTLP. What apollo cannot export is said on warn, and tracing is off:
// a run does not fail for its telemetry.
func FromEnv(getenv func(string) string, version string, warn io.Writer) (cfg Config, ok bool) {
	exporter := strings.TrimSpace(getenv(envExporter))
	switch exporter {
	case "none":
		return cfg, false
	case "otlp":
	case "":
		if getenv(envEndpoint) == "" && getenv(envTracesEndpoint) == "" {
			return cfg, false
		}
	default:
		fmt.Fprintf(warn, "apollo: %s=%s: apollo exports traces with otlp only; no traces are exported\n", envExporter, exporter)
		return cfg, false
	}
	cfg.Protocol = strings.TrimSpace(getenv(envTracesProtocol))
	if cfg.Protocol == "" {
		cfg.Protocol = strings.TrimSpace(getenv(envProtocol))
	}
	switch cfg.Protocol {
	case "":
		cfg.Protocol = ProtocolHTTP
	case ProtocolHTTP, ProtocolGRPC:
	default:
		fmt.Fprintf(warn, "apollo: %s=%s: apollo speaks OTLP as %s or %s; no traces are exported\n",
			envProtocol, cfg.Protocol, ProtocolHTTP, ProtocolGRPC)
		return cfg, false
	}
	cfg.Service = strings.TrimSpace(getenv(envServiceName))
	if cfg.Service == "" {
		cfg.Service = "apollo"
	}
	cfg.Version = version
	return cfg, true
}

// exportTimeout bounds one export, unless OTEL_EXPORTER_OTLP_TIMEOUT says
// otherwise; shutdownTimeout bounds the last one, at exit.
const (
	exportTimeout   = 5 * time.Second
	shutdownTimeout = 2 * time.Second
	// maxQueue bounds the spans waiting for export: past it new spans
	// are dropped, never waited for.
	maxQueue = 4096
)

// Tracer starts and exports spans. A nil *Tracer is tracing off.
type Tracer struct {
	tp *sdktrace.TracerProvider
	tr oteltrace.Tracer
}

// New builds a tracer exporting as cfg says, to the endpoint and with the
// headers the OTEL_EXPORTER_OTLP_* variables name (read by the exporter).
// An export that fails is said once on warn; spans are dropped, the run
// goes on.
func New(ctx context.Context, cfg Config, warn io.Writer) (*Tracer, error) {
	exp, err := newExporter(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("traces: %w", err)
	}
	own := sdkresource.NewSchemaless(attribute.String("service.name", cfg.Service),
		attribute.String("service.version", cfg.Version))
	res, err := sdkresource.Merge(sdkresource.Default(), own)
	if err != nil {
		res = own
	}
	// The SDK reports export errors to its global handler only.
	var once sync.Once
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		once.Do(func() {
			fmt.Fprintf(warn, "apollo: traces: %v (spans are dropped; the run goes on)\n", err)
		})
	}))
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithMaxQueueSize(maxQueue), sdktrace.WithExportTimeout(exportTimeout),
			sdktrace.WithBatchTimeout(time.Second)),
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithIDGenerator(presetIDs{}),
	)
	return &Tracer{tp: tp, tr: tp.Tracer("apollo")}, nil
}

// Shutdown exports what is left, giving it a bounded time.
func (t *Tracer) Shutdown() {
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	_ = t.tp.Shutdown(ctx)
}

// Start describes a span to start.
type Start struct {
	Name string
	// At is its start time; zero is now.
	At time.Time
	// TraceID makes a span without a parent one of this trace (a task's
	// earlier invocations'); zero starts a new trace.
	TraceID oteltrace.TraceID
	// SpanID is its id, chosen ahead (NewSpanID); zero draws one.
	SpanID oteltrace.SpanID
	// Links name spans it follows from (an earlier invocation's).
	Links []oteltrace.SpanContext
	Attrs []attribute.KeyValue
}

// Start starts a span, a child of the span ctx holds if any, and returns
// the context that holds it. With t nil it returns ctx and a nil span.
func (t *Tracer) Start(ctx context.Context, s Start) (context.Context, *Span) {
	if t == nil {
		return ctx, nil
	}
	opts := []oteltrace.SpanStartOption{oteltrace.WithAttributes(s.Attrs...)}
	if !s.At.IsZero() {
		opts = append(opts, oteltrace.WithTimestamp(s.At))
	}
	for _, l := range s.Links {
		if l.IsValid() {
			opts = append(opts, oteltrace.WithLinks(oteltrace.Link{SpanContext: l}))
		}
	}
	sctx, span := t.tr.Start(context.WithValue(ctx, presetKey{}, preset{trace: s.TraceID, span: s.SpanID}), s.Name, opts...)
	return context.WithValue(sctx, presetKey{}, preset{}), &Span{s: span}
}

// Span is a span in flight. A nil *Span does nothing.
type Span struct{ s oteltrace.Span }

// End ends the span with its status: failed, with why as its status
// description, when failed; attrs are added first.
func (s *Span) End(failed bool, why string, attrs ...attribute.KeyValue) {
	s.EndAt(time.Time{}, failed, why, attrs...)
}

// EndAt is End at a given time (zero: now).
func (s *Span) EndAt(at time.Time, failed bool, why string, attrs ...attribute.KeyValue) {
	if s == nil {
		return
	}
	s.s.SetAttributes(attrs...)
	if failed {
		s.s.SetStatus(codes.Error, why)
	}
	var opts []oteltrace.SpanEndOption
	if !at.IsZero() {
		opts = append(opts, oteltrace.WithTimestamp(at))
	}
	s.s.End(opts...)
}

// Context is the span's identity (the zero one for a nil span).
func (s *Span) Context() oteltrace.SpanContext {
	if s == nil {
		return oteltrace.SpanContext{}
	}
	return s.s.SpanContext()
}

// NewTraceID draws a trace id.
func NewTraceID() oteltrace.TraceID {
	var id oteltrace.TraceID
	for !id.IsValid() {
		_, _ = rand.Read(id[:])
	}
	return id
}

// NewSpanID draws a span id.
func NewSpanID() oteltrace.SpanID {
	var id oteltrace.SpanID
	for !id.IsValid() {
		_, _ = rand.Read(id[:])
	}
	return id
}

// DerivedSpanID is the span id named by parts under a parent span id:
// the same parts give the same id, so that a span's id is known before it
// starts wherever it is needed (an attempt's TRACEPARENT, made when its
// shell is started ahead).
func DerivedSpanID(parent oteltrace.SpanID, parts ...string) oteltrace.SpanID {
	h := sha256.New()
	h.Write(parent[:])
	for _, p := range parts {
		h.Write([]byte{0})
		h.Write([]byte(p))
	}
	var id oteltrace.SpanID
	copy(id[:], h.Sum(nil))
	if !id.IsValid() {
		id[7] = 1
	}
	return id
}

// Traceparent is the W3C traceparent header of span id in trace tr,
// sampled: version 00.
func Traceparent(tr oteltrace.TraceID, id oteltrace.SpanID) string {
	return "00-" + tr.String() + "-" + id.String() + "-01"
}

// ParseTraceparent reads a W3C traceparent header; ok is false when it is
// not one.
func ParseTraceparent(s string) (sc oteltrace.SpanContext, ok bool) {
	parts := strings.Split(strings.TrimSpace(s), "-")
	if len(parts) < 4 || len(parts[0]) != 2 || parts[0] == "ff" || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return sc, false
	}
	if parts[0] == "00" && len(parts) != 4 {
		return sc, false
	}
	tr, err := oteltrace.TraceIDFromHex(parts[1])
	if err != nil {
		return sc, false
	}
	id, err := oteltrace.SpanIDFromHex(parts[2])
	if err != nil {
		return sc, false
	}
	flags, err := hex.DecodeString(parts[3])
	if err != nil {
		return sc, false
	}
	sc = oteltrace.NewSpanContext(oteltrace.SpanContextConfig{TraceID: tr, SpanID: id,
		TraceFlags: oteltrace.TraceFlags(flags[0]) & oteltrace.FlagsSampled, Remote: true})
	return sc, sc.IsValid()
}

// WithRemoteParent makes the span a traceparent names the parent of the
// spans started from the returned context (and ctx itself when it names
// none).
func WithRemoteParent(ctx context.Context, traceparent string) context.Context {
	sc, ok := ParseTraceparent(traceparent)
	if !ok {
		return ctx
	}
	return oteltrace.ContextWithRemoteSpanContext(ctx, sc)
}

// FromContext is the span context ctx holds, if any.
func FromContext(ctx context.Context) oteltrace.SpanContext {
	return oteltrace.SpanContextFromContext(ctx)
}

// presetKey carries, in the context a span is started with, the ids chosen
// for it ahead.
type presetKey struct{}

type preset struct {
	trace oteltrace.TraceID
	span  oteltrace.SpanID
}

// presetIDs is the SDK's id generator: the ids chosen ahead when there are
// some, random ones otherwise.
type presetIDs struct{}

func (presetIDs) NewIDs(ctx context.Context) (oteltrace.TraceID, oteltrace.SpanID) {
	p, _ := ctx.Value(presetKey{}).(preset)
	tr, id := p.trace, p.span
	if !tr.IsValid() {
		tr = NewTraceID()
	}
	if !id.IsValid() {
		id = NewSpanID()
	}
	return tr, id
}

func (presetIDs) NewSpanID(ctx context.Context, _ oteltrace.TraceID) oteltrace.SpanID {
	if p, _ := ctx.Value(presetKey{}).(preset); p.span.IsValid() {
		return p.span
	}
	return NewSpanID()
}
