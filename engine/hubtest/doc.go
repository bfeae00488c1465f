// Package hubtest starts hub clusters for tests: embedded nodes on
// loopback ports, stopped and restarted on the same store, the leader of a
// stream found, and a TCP proxy that stops forwarding to cut a client off
// (docs/spec.md §8; the research's test plan, layer 1).
package hubtest
