package engine

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	oteltrace "go.opentelemetry.io/otel/trace"

	"apollo/engine/trace"
	"apollo/eventlog"
)

// The spans of a run (docs/spec.md §5.16), told to package trace at the
// points of the lifecycle: the invocation (execute), each attempt
// (attempt), each cleanup (cleanup) and each retry wait (scheduler.after).
// With tracing off, Options.Tracer is nil and each of these does nothing.

// runTrace is what an invocation knows of its trace.
type runTrace struct {
	tr      *trace.Tracer
	traceID oteltrace.TraceID
	spanID  oteltrace.SpanID // the invocation's span, chosen before its TASK_START
	// parent is the span the invocation's is a child of: the attempt of a
	// run: step that runs this task, or the TRACEPARENT apollo was given.
	parent oteltrace.SpanContext
	// earlier is the span of the invocation before, in the log it resumes.
	earlier oteltrace.SpanContext
	ctx     context.Context // holds the invocation's span once it started
	span    *trace.Span
}

// prepareTrace chooses the invocation's span and trace, before its
// TASK_START records them: a child of the span ctx holds or of apollo's
// TRACEPARENT, or a new trace (which resumeTrace replaces by the task's).
func (r *taskRun) prepareTrace(ctx context.Context) {
	tr := r.e.opts.Tracer
	if tr == nil {
		return
	}
	rt := &runTrace{tr: tr, spanID: trace.NewSpanID()}
	rt.parent = trace.FromContext(ctx)
	if !rt.parent.IsValid() {
		rt.parent = trace.FromContext(trace.WithRemoteParent(context.Background(), os.Getenv("TRACEPARENT")))
	}
	if rt.parent.IsValid() {
		rt.traceID = rt.parent.TraceID()
	} else {
		rt.traceID = trace.NewTraceID()
	}
	r.trace = rt
}

// resumeTrace joins the trace of the invocation the log's latest
// TASK_START records, and links to its span.
func (r *taskRun) resumeTrace(prev *eventlog.StartInfo) {
	rt := r.trace
	if rt == nil || prev == nil || prev.TraceID == "" {
		return
	}
	tid, err1 := oteltrace.TraceIDFromHex(prev.TraceID)
	sid, err2 := oteltrace.SpanIDFromHex(prev.SpanID)
	if err1 != nil || err2 != nil {
		return
	}
	rt.earlier = oteltrace.NewSpanContext(oteltrace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: oteltrace.FlagsSampled, Remote: true})
	if !rt.parent.IsValid() {
		rt.traceID = tid
	}
}

// traceStart writes the invocation's span into its TASK_START.
func (r *taskRun) traceStart(info *eventlog.StartInfo) {
	if rt := r.trace; rt != nil {
		info.TraceID, info.SpanID = rt.traceID.String(), rt.spanID.String()
	}
}

// startInvocation starts the invocation's span; the returned context
// holds it, for the spans of its steps.
func (r *taskRun) startInvocation(ctx context.Context) context.Context {
	rt := r.trace
	if rt == nil {
		return ctx
	}
	pctx := ctx
	if rt.parent.IsValid() && !trace.FromContext(ctx).IsValid() {
		pctx = oteltrace.ContextWithRemoteSpanContext(ctx, rt.parent)
	}
	invocation := 1
	if r.state != nil {
		invocation = r.state.Invocations
	}
	var links []oteltrace.SpanContext
	if rt.earlier.IsValid() {
		links = append(links, rt.earlier)
	}
	rt.ctx, rt.span = rt.tr.Start(pctx, trace.Start{Name: "run " + r.t.p.TaskName, At: r.started,
		TraceID: rt.traceID, SpanID: rt.spanID, Links: links,
		Attrs: []attribute.KeyValue{
			attribute.String(trace.AttrTask, r.masked(r.t.id)),
			attribute.String(trace.AttrTaskName, r.masked(r.t.p.TaskName)),
			attribute.String(trace.AttrPipeline, r.masked(r.t.p.Path)),
			attribute.Int(trace.AttrInvocation, invocation),
			attribute.Bool(trace.AttrResumed, !r.created),
		}})
	return rt.ctx
}

// endInvocation ends the invocation's span with the run's error.
func (r *taskRun) endInvocation(err error) {
	if r.trace == nil {
		return
	}
	status := eventlog.Success
	why := ""
	var ie *InterruptedError
	switch {
	case errors.As(err, &ie):
		status, why = "INTERRUPTED", r.masked(err.Error())
	case err != nil:
		status, why = eventlog.Failed, r.masked(err.Error())
	}
	r.trace.span.End(err != nil, why, attribute.String(trace.AttrStatus, status))
}

// masked is s with the run's secrets masked, cut for an attribute.
func (r *taskRun) masked(s string) string {
	if r.mask != nil {
		s = r.mask.String(s)
	}
	if len(s) > 1024 {
		s = s[:1024] + "…"
	}
	return s
}

// spanID is the id of the span of a step's attempt or cleanup (kind),
// known before it starts: the parent a step's own spans name in its
// TRACEPARENT.
func (r *taskRun) spanID(kind, step string, retry int) oteltrace.SpanID {
	return trace.DerivedSpanID(r.trace.spanID, kind, step, strconv.Itoa(retry))
}

// traceparent is the TRACEPARENT of a step's attempt or cleanup, "" when
// tracing is off.
func (r *taskRun) traceparent(kind, step string, retry int) string {
	if r.trace == nil {
		return ""
	}
	return trace.Traceparent(r.trace.traceID, r.spanID(kind, step, retry))
}

// The kinds of a step's spans.
const (
	spanAttempt = "attempt"
	spanCleanup = "cleanup"
)

// spanNow is when a span begins: the run's clock with tracing on, the zero
// time with it off (a run that traces nothing reads its clock no more often
// than before, which tests with a ticking clock rely on).
func (r *taskRun) spanNow() time.Time {
	if r.trace == nil {
		return time.Time{}
	}
	return r.e.opts.Clock.Now()
}

// startStepSpan starts the span of a step's attempt or cleanup (kind),
// begun at began.
func (r *taskRun) startStepSpan(ctx context.Context, kind string, n *node, retry int, began time.Time,
	attrs ...attribute.KeyValue) (context.Context, *trace.Span) {
	if r.trace == nil {
		return ctx, nil
	}
	attrs = append(attrs, attribute.String(trace.AttrTask, r.masked(r.t.id)),
		attribute.String(trace.AttrStep, r.masked(n.id())), attribute.Int(trace.AttrAttempt, retry))
	if c := n.rs.step.Container; c != nil {
		attrs = append(attrs, attribute.String(trace.AttrImage, r.masked(c.Image)))
	}
	name := "step " + n.id()
	if kind == spanCleanup {
		name = "cleanup " + n.id()
	}
	return r.trace.tr.Start(ctx, trace.Start{Name: name, At: began, SpanID: r.spanID(kind, n.id(), retry), Attrs: attrs})
}

// endAttemptSpan ends an attempt's span with its end d and what its
// carrier knows.
func (r *taskRun) endAttemptSpan(sp *trace.Span, at *attemptRun, d nodeDone, res attemptTrace) {
	if sp == nil {
		return
	}
	status := shownStatus(d.status)
	if d.status == "" {
		status = eventlog.Running // lost, or left for the next run
	}
	attrs := []attribute.KeyValue{attribute.String(trace.AttrStatus, status)}
	if res.exitCode != 0 {
		attrs = append(attrs, attribute.Int(trace.AttrExitCode, res.exitCode))
	}
	if at.cachedFrom != "" {
		attrs = append(attrs, attribute.String(trace.AttrCachedFrom, r.masked(at.cachedFrom)))
	}
	if res.worker != "" {
		attrs = append(attrs, attribute.String(trace.AttrWorker, r.masked(res.worker)))
	}
	if at.imageID != "" {
		attrs = append(attrs, attribute.String(trace.AttrImageID, at.imageID))
	}
	why := res.err
	switch {
	case d.err != nil:
		why = d.err.Error()
	case d.logErr != nil:
		why = d.logErr.Error()
	}
	failed := status == eventlog.Failed || status == "RETRY" || d.logErr != nil
	if !failed {
		why = ""
	}
	sp.End(failed, r.masked(why), attrs...)
}

// attemptTrace is what an attempt's span tells beyond its end: its exit
// code, and the worker that ran it.
type attemptTrace struct {
	exitCode int
	worker   string
	err      string // its body's error, unmasked
}

// retryWaitSpan starts the span of the wait before a step's next attempt
// and returns what ends it.
func (r *taskRun) retryWaitSpan(n *node, delay time.Duration) func() {
	if r.trace == nil || r.trace.ctx == nil {
		return func() {}
	}
	_, sp := r.trace.tr.Start(r.trace.ctx, trace.Start{Name: "retry wait " + n.id(), Attrs: []attribute.KeyValue{
		attribute.String(trace.AttrTask, r.masked(r.t.id)), attribute.String(trace.AttrStep, r.masked(n.id())),
		attribute.Int(trace.AttrAttempt, n.retry), attribute.Int64(trace.AttrDelayMS, delay.Milliseconds())}})
	var once sync.Once
	return func() { once.Do(func() { sp.End(false, "") }) }
}

// setEnv sets name=value in env, in place of an entry of that name.
func setEnv(env []string, name, value string) []string {
	for i := len(env) - 1; i >= 0; i-- {
		if len(env[i]) > len(name) && env[i][len(name)] == '=' && env[i][:len(name)] == name {
			env[i] = name + "=" + value
			return env
		}
	}
	return append(env, name+"="+value)
}

// traceparentEnv is the W3C trace context variable a step's body is given.
const traceparentEnv = "TRACEPARENT"

// endStepSpan ends a cleanup's span with its record's status.
func (r *taskRun) endStepSpan(sp *trace.Span, status string, exitCode int, why string) {
	if sp == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.String(trace.AttrStatus, status)}
	if exitCode != 0 {
		attrs = append(attrs, attribute.Int(trace.AttrExitCode, exitCode))
	}
	sp.End(status == eventlog.Failed, r.masked(why), attrs...)
}
