package e2e_test

import (
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// collector is an OTLP/HTTP trace receiver on loopback: it decodes what
// apollo exports as a collector does (ExportTraceServiceRequest protobufs
// on /v1/traces) and keeps the spans.
type collector struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	service string
	headers http.Header
}

func newCollector(t *testing.T) *collector {
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req collectorpb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		c.headers = r.Header.Clone()
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.GetResource().GetAttributes() {
				if a.Key == "service.name" {
					c.service = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				c.spans = append(c.spans, ss.Spans...)
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// env points apollo at the collector.
func (c *collector) env(extra ...string) []string {
	return append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + c.srv.URL, "OTEL_SERVICE_NAME=apollo-e2e",
		"OTEL_EXPORTER_OTLP_HEADERS=x-team=data"}, extra...)
}

// take returns the spans received so far and forgets them.
func (c *collector) take() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.spans
	c.spans = nil
	return s
}

func attr(s *tracepb.Span, key string) *commonpb.AnyValue {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value
		}
	}
	return nil
}

func attrString(s *tracepb.Span, key string) string { return attr(s, key).GetStringValue() }
func attrInt(s *tracepb.Span, key string) int64     { return attr(s, key).GetIntValue() }

func spansNamed(spans []*tracepb.Span, name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

const tracedPipeline = `task_name: traced
secrets: {TOKEN: env}
retry_delay_seconds: 0.1
steps:
  - id: hello
    command: echo "$TRACEPARENT" > traceparent.txt; echo "token $TOKEN"
  - id: flaky
    depends_on: [hello]
    command: test -f flaky.ok || { touch flaky.ok; echo "failing with $TOKEN"; exit 3; }
    max_retries: 1
    retry_policy: fixed
  - id: inlua
    depends_on: [hello]
    allow: [exec]
    lua: |
      local r = require("apollo.exec").run({"sh", "-c", "printf %s \"$TRACEPARENT\""})
      return {tp = ctx.traceparent, exec_tp = r.stdout}
`

// TestTracesOfARun runs a pipeline with OTEL_EXPORTER_OTLP_ENDPOINT set
// and checks the spans the collector receives: one for the invocation, one
// per attempt (a failed then retried step has two, and a retry wait),
// their attributes, the TRACEPARENT a step is given, and no secret in any
// attribute or status.
func TestTracesOfARun(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	dir := t.TempDir()
	writePipeline(t, dir, tracedPipeline)
	const secret = "s3cret-tok-42"
	res := runApollo(t, dir, col.env("TOKEN="+secret), "run", "pipeline.yaml", "--task-id", "t1")
	if res.code != exitOK {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
	}
	spans := col.take()
	if col.service != "apollo-e2e" {
		t.Errorf("service.name = %q, want apollo-e2e (OTEL_SERVICE_NAME)", col.service)
	}
	if got := col.headers.Get("X-Team"); got != "data" {
		t.Errorf("header x-team = %q, want data (OTEL_EXPORTER_OTLP_HEADERS)", got)
	}
	runs := spansNamed(spans, "run traced")
	if len(runs) != 1 {
		t.Fatalf("%d invocation spans, want 1; spans: %v", len(runs), names(spans))
	}
	run := runs[0]
	if attrString(run, "apollo.task.id") != "t1" || attrString(run, "apollo.status") != "SUCCESS" {
		t.Errorf("invocation span attributes = %v", run.Attributes)
	}
	for _, s := range spans {
		if string(s.TraceId) != string(run.TraceId) {
			t.Errorf("span %q is in trace %x, want the run's %x", s.Name, s.TraceId, run.TraceId)
		}
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), secret) {
				t.Errorf("span %q: attribute %s holds the secret", s.Name, a.Key)
			}
		}
		if strings.Contains(s.GetStatus().GetMessage(), secret) {
			t.Errorf("span %q: status holds the secret", s.Name)
		}
	}
	hello := spansNamed(spans, "step hello")
	if len(hello) != 1 || string(hello[0].ParentSpanId) != string(run.SpanId) {
		t.Fatalf("step hello: %d spans, want 1, child of the invocation's", len(hello))
	}
	if attrString(hello[0], "apollo.step.id") != "hello" || attrInt(hello[0], "apollo.attempt") != 0 ||
		attrString(hello[0], "apollo.status") != "SUCCESS" {
		t.Errorf("step hello's attributes = %v", hello[0].Attributes)
	}
	tp, err := os.ReadFile(filepath.Join(dir, "traceparent.txt"))
	if err != nil {
		t.Fatal(err)
	}
	want := "00-" + hex.EncodeToString(run.TraceId) + "-" + hex.EncodeToString(hello[0].SpanId) + "-01"
	if got := strings.TrimSpace(string(tp)); got != want {
		t.Errorf("$TRACEPARENT = %q, want %q (the attempt's span)", got, want)
	}
	flaky := spansNamed(spans, "step flaky")
	if len(flaky) != 2 {
		t.Fatalf("step flaky: %d attempt spans, want 2 (failed, then retried)", len(flaky))
	}
	byAttempt := map[int64]*tracepb.Span{}
	for _, s := range flaky {
		byAttempt[attrInt(s, "apollo.attempt")] = s
	}
	if s := byAttempt[0]; s == nil || attrString(s, "apollo.status") != "RETRY" || attrInt(s, "apollo.exit_code") != 3 ||
		s.GetStatus().GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("flaky's attempt 0: want RETRY, exit code 3, an error status; got %v", s)
	}
	if s := byAttempt[1]; s == nil || attrString(s, "apollo.status") != "SUCCESS" {
		t.Errorf("flaky's attempt 1: want SUCCESS; got %v", s)
	}
	if waits := spansNamed(spans, "retry wait flaky"); len(waits) != 1 || attrInt(waits[0], "apollo.retry.delay_ms") != 100 {
		t.Errorf("retry wait spans of flaky: %v, want one of 100 ms", waits)
	}
	lua := spansNamed(spans, "step inlua")
	if len(lua) != 1 {
		t.Fatalf("step inlua: %d spans, want 1", len(lua))
	}
	logText, err := os.ReadFile(taskLog(dir, "t1"))
	if err != nil {
		t.Fatal(err)
	}
	wantTP := "00-" + hex.EncodeToString(run.TraceId) + "-" + hex.EncodeToString(lua[0].SpanId) + "-01"
	if !strings.Contains(string(logText), `"tp":"`+wantTP+`"`) {
		t.Errorf("the Lua step's output does not hold ctx.traceparent %s", wantTP)
	}
	if !strings.Contains(string(logText), `"exec_tp":"`+wantTP+`"`) {
		t.Errorf("a command apollo.exec runs does not have the attempt's TRACEPARENT %s", wantTP)
	}
	if !strings.Contains(string(logText), `"trace_id":"`+hex.EncodeToString(run.TraceId)+`"`) {
		t.Errorf("the TASK_START does not record the trace id")
	}
	if strings.Contains(string(logText), secret) {
		t.Errorf("the log holds the secret")
	}
}

func names(spans []*tracepb.Span) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// TestTracesOfAResumedRun kills a traced run, then resumes it: the resumed
// invocation's span is in the same trace and links to the first's, and a
// cleanup of the cut-off attempt has its span.
func TestTracesOfAResumedRun(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	dir := t.TempDir()
	writePipeline(t, dir, `task_name: resumed
steps:
  - id: first
    command: echo one
  - id: second
    depends_on: [first]
    command: test -f go.ok || sleep 30
    cleanup_command: echo cleaning
`)
	cmd := apolloCmd(t, dir, col.env(), "run", "pipeline.yaml", "--task-id", "r1")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Once second runs (its STEP_START is in the log), kill apollo.
	deadline := time.Now().Add(30 * time.Second)
	for ; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if taskLog(dir, "r1") == "" {
			continue
		}
		if b, _ := os.ReadFile(taskLog(dir, "r1")); strings.Contains(string(b), `"step_id":"second","event_type":"STEP_START"`) {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	first := readStart(t, taskLog(dir, "r1"))
	if first == "" {
		t.Fatal("the first invocation's TASK_START records no trace")
	}
	col.take() // the first invocation was killed: what it exported is not asserted
	os.WriteFile(filepath.Join(dir, "go.ok"), nil, 0o644)
	res := runApollo(t, dir, col.env(), "run", "pipeline.yaml", "--task-id", "r1")
	if res.code != exitOK {
		t.Fatalf("resume: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	spans := col.take()
	runs := spansNamed(spans, "run resumed")
	if len(runs) != 1 {
		t.Fatalf("%d invocation spans, want 1: %v", len(runs), names(spans))
	}
	run := runs[0]
	traceID, spanID, _ := strings.Cut(first, "/")
	if hex.EncodeToString(run.TraceId) != traceID {
		t.Errorf("resumed invocation in trace %x, want the task's %s", run.TraceId, traceID)
	}
	if len(run.Links) != 1 || hex.EncodeToString(run.Links[0].SpanId) != spanID || hex.EncodeToString(run.Links[0].TraceId) != traceID {
		t.Errorf("resumed invocation's links = %v, want one to the first invocation's span %s", run.Links, spanID)
	}
	if cl := spansNamed(spans, "cleanup second"); len(cl) != 1 || !attr(cl[0], "apollo.cleanup.dirty").GetBoolValue() {
		t.Errorf("cleanup spans of second: %v, want one, dirty", cl)
	}
	if s := spansNamed(spans, "step second"); len(s) != 1 || attrString(s[0], "apollo.status") != "SUCCESS" {
		t.Errorf("step second's spans in the resume: %v", s)
	}
}

// readStart is "traceid/spanid" of the first TASK_START of a log.
func readStart(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	get := func(key string) string {
		_, rest, ok := strings.Cut(line, `"`+key+`":"`)
		if !ok {
			return ""
		}
		v, _, _ := strings.Cut(rest, `"`)
		return v
	}
	if get("trace_id") == "" {
		return ""
	}
	return get("trace_id") + "/" + get("span_id")
}

// TestTracesCollectorDown runs with the endpoint on a closed port: the run
// completes and exits 0.
func TestTracesCollectorDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	writePipeline(t, dir, "task_name: down\nsteps:\n  - id: a\n    command: echo a\n  - id: b\n    depends_on: [a]\n    command: echo b\n")
	res := runApollo(t, dir, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + addr}, "run", "pipeline.yaml", "--task-id", "d1")
	if res.code != exitOK {
		t.Fatalf("run with the collector down: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// TestTracesOfAChildAndACacheHit runs a pipeline whose run: step runs a
// child pipeline, twice as two task runs: the child's invocation span is a
// child of the parent's attempt, and the second run's cached step names
// the task it took its result from.
func TestTracesOfAChildAndACacheHit(t *testing.T) {
	t.Parallel()
	col := newCollector(t)
	dir := t.TempDir()
	writePipeline(t, dir, `task_name: parent
steps:
  - id: sub
    run: child.yaml
  - id: costly
    cache: true
    command: echo computed
`)
	if err := os.WriteFile(filepath.Join(dir, "child.yaml"), []byte("task_name: child\nsteps:\n  - id: inner\n    command: echo inner\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"c1", "c2"} {
		if res := runApollo(t, dir, col.env(), "run", "pipeline.yaml", "--task-id", id); res.code != exitOK {
			t.Fatalf("run %s: exit %d\n%s%s", id, res.code, res.stdout, res.stderr)
		}
	}
	spans := col.take()
	subs, children := spansNamed(spans, "step sub"), spansNamed(spans, "run child")
	if len(subs) != 2 || len(children) != 2 {
		t.Fatalf("%d spans of step sub and %d of the child's invocation, want 2 and 2: %v", len(subs), len(children), names(spans))
	}
	for _, c := range children {
		found := false
		for _, s := range subs {
			if string(c.ParentSpanId) == string(s.SpanId) && string(c.TraceId) == string(s.TraceId) {
				found = true
			}
		}
		if !found {
			t.Errorf("the child's invocation span %x is not a child of an attempt of step sub", c.SpanId)
		}
	}
	var cached []string
	for _, s := range spansNamed(spans, "step costly") {
		if v := attrString(s, "apollo.cached_from"); v != "" {
			cached = append(cached, v)
		}
	}
	if len(cached) != 1 || cached[0] != "c1" {
		t.Errorf("apollo.cached_from of step costly's spans = %v, want [c1]", cached)
	}
}
