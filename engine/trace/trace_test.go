package trace

import (
	"bytes"
	"strings"
	"testing"
)

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		ok       bool
		protocol string
		service  string
		warns    bool
	}{
		{name: "nothing set", env: nil, ok: false},
		{name: "endpoint", env: map[string]string{envEndpoint: "http://127.0.0.1:4318"}, ok: true, protocol: ProtocolHTTP, service: "apollo"},
		{name: "traces endpoint", env: map[string]string{envTracesEndpoint: "http://127.0.0.1:4318/v1/traces"}, ok: true, protocol: ProtocolHTTP, service: "apollo"},
		{name: "otlp alone", env: map[string]string{envExporter: "otlp"}, ok: true, protocol: ProtocolHTTP, service: "apollo"},
		{name: "none wins", env: map[string]string{envExporter: "none", envEndpoint: "http://127.0.0.1:4318"}, ok: false},
		{name: "grpc", env: map[string]string{envEndpoint: "http://127.0.0.1:4317", envProtocol: "grpc"}, ok: true, protocol: ProtocolGRPC, service: "apollo"},
		{name: "traces protocol first", env: map[string]string{envEndpoint: "x", envProtocol: "grpc", envTracesProtocol: "http/protobuf"}, ok: true, protocol: ProtocolHTTP, service: "apollo"},
		{name: "service name", env: map[string]string{envEndpoint: "x", envServiceName: "etl"}, ok: true, protocol: ProtocolHTTP, service: "etl"},
		{name: "another exporter", env: map[string]string{envExporter: "zipkin", envEndpoint: "x"}, ok: false, warns: true},
		{name: "http/json", env: map[string]string{envEndpoint: "x", envProtocol: "http/json"}, ok: false, warns: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var warn bytes.Buffer
			cfg, ok := FromEnv(func(k string) string { return tc.env[k] }, "v1", &warn)
			if ok != tc.ok {
				t.Fatalf("FromEnv(%v) ok = %v, want %v", tc.env, ok, tc.ok)
			}
			if ok && (cfg.Protocol != tc.protocol || cfg.Service != tc.service || cfg.Version != "v1") {
				t.Errorf("FromEnv(%v) = %+v, want protocol %s, service %s", tc.env, cfg, tc.protocol, tc.service)
			}
			if got := warn.Len() > 0; got != tc.warns {
				t.Errorf("FromEnv(%v) warned %q, want a warning: %v", tc.env, warn.String(), tc.warns)
			}
		})
	}
}

func TestTraceparent(t *testing.T) {
	tr, id := NewTraceID(), NewSpanID()
	tp := Traceparent(tr, id)
	sc, ok := ParseTraceparent(tp)
	if !ok || sc.TraceID() != tr || sc.SpanID() != id || !sc.IsSampled() {
		t.Errorf("ParseTraceparent(%q) = %v, %v; want trace %s, span %s, sampled", tp, sc, ok, tr, id)
	}
	for _, bad := range []string{"", "00-abc", "00-" + strings.Repeat("0", 32) + "-" + strings.Repeat("1", 16) + "-01",
		"ff-" + tr.String() + "-" + id.String() + "-01", "00-" + tr.String() + "-" + id.String() + "-01-extra"} {
		if _, ok := ParseTraceparent(bad); ok {
			t.Errorf("ParseTraceparent(%q) ok, want refused", bad)
		}
	}
	if a, b := DerivedSpanID(id, "attempt", "s", "0"), DerivedSpanID(id, "attempt", "s", "1"); a == b || a != DerivedSpanID(id, "attempt", "s", "0") {
		t.Errorf("DerivedSpanID: %s and %s: want distinct ids, the same for the same parts", a, b)
	}
}

func TestOffIsNil(t *testing.T) {
	var tr *Tracer
	ctx, sp := tr.Start(t.Context(), Start{Name: "x"})
	if sp != nil || ctx != t.Context() {
		t.Errorf("a nil tracer started a span")
	}
	sp.End(true, "why")
	tr.Shutdown()
}
