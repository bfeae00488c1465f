//go:build !linux

package luaproc

// setDataLimit does nothing where RLIMIT_DATA does not bound mmap (macOS):
// there the heap meter and the Go memory limit bound a job.
func setDataLimit(extra uint64) {}

// WithoutDataLimit runs fn: there is no RLIMIT_DATA to lift here.
func WithoutDataLimit(fn func() error) error { return fn() }
