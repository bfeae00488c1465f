package executor

import "golang.org/x/sys/unix"

// limitData sets a hard limit on this process's memory: RLIMIT_DATA bounds
// the writable memory the process can map (Linux ≥ 4.7); RLIMIT_AS would
// also count the Go runtime's address-space reservations (over a GiB before
// any work).
func limitData(bytes uint64) error {
	return unix.Setrlimit(unix.RLIMIT_DATA, &unix.Rlimit{Cur: bytes, Max: bytes})
}
