package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"

	"apollo/engine/executor"
	"apollo/engine/remote"
	"apollo/engine/textfmt"
	"apollo/engine/trace"
)

// startSpan starts the worker's span of an attempt, a child of the
// coordinator's (its message's traceparent), and gives the body its
// TRACEPARENT: this span's, or the coordinator's when the worker does not
// trace.
func (w *Worker) startSpan(ctx context.Context, work *remote.Work, exa *executor.Attempt) *trace.Span {
	tp := work.Traceparent
	if tp == "" {
		return nil
	}
	_, sp := w.o.Tracer.Start(trace.WithRemoteParent(ctx, tp), trace.Start{Name: "step " + work.Step + " on worker",
		Attrs: []attribute.KeyValue{attribute.String(trace.AttrTask, work.Task),
			attribute.String(trace.AttrStep, work.Step), attribute.Int(trace.AttrAttempt, work.Attempt),
			attribute.String(trace.AttrWorker, w.id)}})
	if sc := sp.Context(); sc.IsValid() {
		tp = trace.Traceparent(sc.TraceID(), sc.SpanID())
	}
	exa.Env = append(exa.Env, "TRACEPARENT="+tp)
	return sp
}

// endSpan ends the worker's span of an attempt with its result.
func (w *Worker) endSpan(sp *trace.Span, res executor.Result) {
	if sp == nil {
		return
	}
	status := "SUCCESS"
	why := ""
	if res.Err != nil {
		status, why = "FAILED", textfmt.OneLine(res.Err.Error(), 1024)
	}
	attrs := []attribute.KeyValue{attribute.String(trace.AttrStatus, status)}
	if res.ExitCode != 0 {
		attrs = append(attrs, attribute.Int(trace.AttrExitCode, res.ExitCode))
	}
	sp.End(res.Err != nil, why, attrs...)
}
