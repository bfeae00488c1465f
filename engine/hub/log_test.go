package hub

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestLoggerRateLimits checks that a notice the server repeats (a route
// that cannot connect, every second while a peer is down) is printed the
// first time, then at most once a minute with how many were held back.
func TestLoggerRateLimits(t *testing.T) {
	var out bytes.Buffer
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	l := &logger{w: &out, name: "n1", now: func() time.Time { return now }}
	const format = "%s - rid:%d - Error trying to connect to route (attempt %v): %v"
	for i := 1; i <= 130; i++ { // one a second for 130 s
		l.Errorf(format, "127.0.0.1:6222", 5, i, "connection refused")
		if i == 10 {
			l.Warnf("something else %d", 1) // another notice is printed at once
		}
		now = now.Add(time.Second)
	}
	got := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"apollo hub n1: error: 127.0.0.1:6222 - rid:5 - Error trying to connect to route (attempt 1): connection refused",
		"apollo hub n1: warning: something else 1",
		"apollo hub n1: error: 127.0.0.1:6222 - rid:5 - Error trying to connect to route (attempt 61): connection refused (59 more like it in the last 1m0s)",
		"apollo hub n1: error: 127.0.0.1:6222 - rid:5 - Error trying to connect to route (attempt 121): connection refused (59 more like it in the last 1m0s)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("log =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
