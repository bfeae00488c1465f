//go:build !linux

package engine

import "os"

// datasync is what the event log's writer does to make a record durable
// where there is no fdatasync(2): (*os.File).Sync, on macOS an F_FULLFSYNC.
func datasync(f *os.File) error { return f.Sync() }
