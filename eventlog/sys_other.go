//go:build !linux

package eventlog

// datasync makes a file's data durable through its Sync. There is no
// fdatasync(2) to use here, and on macOS (*os.File).Sync issues
// fcntl(F_FULLFSYNC) rather than fsync(2), which there only hands the data
// to the drive, whose cache a power loss empties: a STEP_START "fsynced"
// that way could vanish and the attempt with it, the one thing the log must
// never allow. F_FULLFSYNC costs milliseconds; group commit (one fsync for
// the records of many parallel steps) is what keeps that affordable.
func datasync(f File) error {
	return f.Sync()
}

// lockHolder is Linux's /proc/locks lookup; elsewhere there is none and
// Holder probes the lock instead.
func lockHolder(dev, ino uint64) (pid int, held, ok bool) {
	return 0, false, false
}
