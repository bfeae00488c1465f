package listen

import "testing"

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.1.2.3:1": true, "[::1]:4222": true, "localhost:0": true,
		"0.0.0.0:8080": false, ":8080": false, "[::]:4222": false, "10.0.0.1:6222": false,
		"example.com:80": false, "127.0.0.1": false, "": false,
	} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
