package web

import (
	"net/http"
	"net/http/httptest"
	_ "net/http/pprof" // registers /debug/pprof/ on http.DefaultServeMux, as nats-server does in the binary
	"testing"
)

// TestNoDebugHandlers: the apollo binary links net/http/pprof (through
// nats-server), which registers profiling and memory-dump handlers on
// http.DefaultServeMux. apollo serve has a mux of its own and must never
// answer them: they would show the process's memory, secrets included.
func TestNoDebugHandlers(t *testing.T) {
	if _, pattern := http.DefaultServeMux.Handler(httptest.NewRequest("GET", "/debug/pprof/", nil)); pattern == "" {
		t.Fatal("net/http/pprof did not register on the default mux: this test would prove nothing")
	}
	h := newHarness(t, fixture(t), nil)
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/cmdline", "/debug/vars"} {
		if code, body := h.get(t, path); code == http.StatusOK {
			t.Errorf("GET %s = 200 (%.80q), want it not served", path, body)
		}
	}
}
