package engine

import (
	"os"

	"golang.org/x/sys/unix"
)

// datasync is what the event log's writer does to make a record durable:
// fdatasync(2).
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }
