package engine

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"apollo/engine/trace"
	"apollo/engine/worker"
)

// otlpSink is an OTLP/HTTP trace receiver on loopback that decodes the
// collector's protocol and keeps the spans.
type otlpSink struct {
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPSink(t *testing.T) (*otlpSink, string) {
	s := &otlpSink{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				s.spans = append(s.spans, ss.Spans...)
			}
		}
		s.mu.Unlock()
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return s, srv.URL
}

func (s *otlpSink) named(name string) []*tracepb.Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*tracepb.Span
	for _, sp := range s.spans {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

// TestHubWorkerSpansJoinTheTrace runs a step on a worker through the hub,
// coordinator and worker each exporting its spans: the worker's span of
// the attempt is a child of the coordinator's, in its trace, and the
// body's TRACEPARENT names the worker's span.
func TestHubWorkerSpansJoinTheTrace(t *testing.T) {
	needSeconds(t)
	sink, url := newOTLPSink(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", url)
	newTracer := func() *trace.Tracer {
		cfg, ok := trace.FromEnv(os.Getenv, "test", io.Discard)
		if !ok {
			t.Fatal("OTEL_EXPORTER_OTLP_ENDPOINT set, yet tracing is off")
		}
		tr, err := trace.New(t.Context(), cfg, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	e := newHubEnv(t, 1)
	wt := newTracer()
	e.startWorker("w1", e.cl.URLs(), func(o *worker.Options) { o.Tracer = wt })
	path := filepath.Join(e.dir, "traced.yaml")
	if err := os.WriteFile(path, []byte("task_name: hubtraced\nsteps:\n  - id: a\n    command: echo \"$TRACEPARENT\" > tp.txt\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ct := newTracer()
	eng := New(Options{StateDir: filepath.Join(e.dir, ".apollo"), Workdir: e.dir, Stdout: io.Discard,
		Stderr: io.Discard, Progress: ProgressQuiet, KillGrace: 500 * time.Millisecond, Tracer: ct})
	ro := RunOptions{TaskID: e.task, Hub: HubOptions{URLs: e.cl.URLs(), CallTimeout: time.Second, GiveUp: 20 * time.Second,
		LeaseTTL: 6 * time.Second}}
	if err := eng.Run(t.Context(), path, ro); err != nil {
		t.Fatal(err)
	}
	ct.Shutdown()
	wt.Shutdown()
	coord, onWorker := sink.named("step a"), sink.named("step a on worker")
	if len(coord) != 1 || len(onWorker) != 1 {
		t.Fatalf("%d coordinator spans and %d worker spans of step a, want 1 and 1", len(coord), len(onWorker))
	}
	c, w := coord[0], onWorker[0]
	if string(w.TraceId) != string(c.TraceId) || string(w.ParentSpanId) != string(c.SpanId) {
		t.Errorf("the worker's span (trace %x, parent %x) is not a child of the coordinator's (trace %x, span %x)",
			w.TraceId, w.ParentSpanId, c.TraceId, c.SpanId)
	}
	var worker string
	for _, a := range c.Attributes {
		if a.Key == trace.AttrWorker {
			worker = a.Value.GetStringValue()
		}
	}
	if worker == "" {
		t.Errorf("the coordinator's span names no %s", trace.AttrWorker)
	}
	tp, err := os.ReadFile(filepath.Join(e.dir, "tp.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := "00-" + hex.EncodeToString(w.TraceId) + "-" + hex.EncodeToString(w.SpanId) + "-01"
	if got := strings.TrimSpace(string(tp)); got != want {
		t.Errorf("$TRACEPARENT on the worker = %q, want the worker's span %q", got, want)
	}
}
