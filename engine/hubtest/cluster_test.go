package hubtest

import "testing"

// TestFreePortsDistinct: the ports of one cluster are never handed out
// twice (a node's client port equal to its route port cannot bind).
func TestFreePortsDistinct(t *testing.T) {
	for range 20 {
		ports, err := FreePorts(6)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		for _, p := range ports {
			if seen[p] || p <= 0 {
				t.Fatalf("FreePorts(6) = %v: a port twice or none", ports)
			}
			seen[p] = true
		}
	}
}
