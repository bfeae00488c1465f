package remote

import "testing"

// TestServerNewEnough: a hub's NATS server older than 2.11 is refused, a
// newer one or a version that does not read as one is let through.
func TestServerNewEnough(t *testing.T) {
	for v, want := range map[string]bool{
		"2.9.25": false, "2.10.22": false, "1.4.1": false,
		"2.11.0": true, "2.11.9-RC.1": true, "2.15.3": true, "3.0.0": true, "v2.12.1": true,
		"": true, "dev": true,
	} {
		if got := serverNewEnough(v); got != want {
			t.Errorf("serverNewEnough(%q) = %v, want %v", v, got, want)
		}
	}
	msg := (&ServerVersionError{URLs: "nats://h:4222", Version: "2.10.22"}).Error()
	if want := "hub nats://h:4222 runs NATS server 2.10.22; apollo needs 2.11.0 or later"; len(msg) < len(want) || msg[:len(want)] != want {
		t.Errorf("message %q", msg)
	}
}
