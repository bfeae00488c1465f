//go:build !linux

package executor

// limitData sets no hard limit off Linux. On macOS (12 and later) the
// kernel checks RLIMIT_DATA, like RLIMIT_AS, against the size of the whole
// address space, the Go runtime's reservations and the system's shared
// mappings included, and setrlimit(2) refuses a limit below what is mapped
// already: no limit near a script's memory_mb could be set or would mean
// it. The runtime's soft limit and the Lua heap watchdog still hold.
func limitData(bytes uint64) error { return nil }
