package trace

import (
	"context"
	"io"
	"net"
	"os"
	"sync"
	"testing"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// grpcSink is an OTLP/gRPC trace receiver: the collector's TraceService.
type grpcSink struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (s *grpcSink) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				s.names = append(s.names, sp.Name)
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// TestExportOverGRPC exports a span with OTEL_EXPORTER_OTLP_PROTOCOL=grpc
// to a gRPC receiver on loopback.
func TestExportOverGRPC(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	sink := &grpcSink{}
	collectorpb.RegisterTraceServiceServer(srv, sink)
	go srv.Serve(l)
	defer srv.Stop()
	t.Setenv(envEndpoint, "http://"+l.Addr().String())
	t.Setenv(envProtocol, ProtocolGRPC)
	cfg, ok := FromEnv(os.Getenv, "test", io.Discard)
	if !ok || cfg.Protocol != ProtocolGRPC {
		t.Fatalf("FromEnv = %+v, %v; want grpc", cfg, ok)
	}
	tr, err := New(t.Context(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, sp := tr.Start(t.Context(), Start{Name: "over grpc"})
	sp.End(false, "")
	tr.Shutdown()
	sink.mu.Lock()
	defer sink.mu.Unlock()
	if len(sink.names) != 1 || sink.names[0] != "over grpc" {
		t.Errorf("the receiver got %v, want the span over grpc", sink.names)
	}
}
