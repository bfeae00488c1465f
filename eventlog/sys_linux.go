package eventlog

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// datasync makes a file's data durable, and the metadata needed to read it
// back (its size), with fdatasync(2): an append need not wait for its
// timestamps to reach the disk. A wrapped file (a test double) is synced
// through its own Sync.
func datasync(f File) error {
	of, ok := f.(*os.File)
	if !ok {
		return f.Sync()
	}
	return ignoringEINTR(func() error { return unix.Fdatasync(int(of.Fd())) })
}

// lockHolder finds who holds a flock on the file with device dev and inode
// ino in /proc/locks, which it can read without taking the lock. ok is false
// when /proc/locks cannot be read.
func lockHolder(dev, ino uint64) (pid int, held, ok bool) {
	f, err := os.Open("/proc/locks")
	if err != nil {
		return 0, false, false
	}
	defer f.Close()
	// Lines look like: "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF",
	// the fourth field being the pid and the fifth major:minor:inode, the
	// device numbers in hex. A waiting lock has "->" after the number.
	major, minor := unix.Major(dev), unix.Minor(dev)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[1] != "FLOCK" || fields[3] != "WRITE" {
			continue
		}
		id := strings.Split(fields[5], ":")
		if len(id) != 3 {
			continue
		}
		if n, err := strconv.ParseUint(id[2], 10, 64); err != nil || n != ino {
			continue
		}
		ma, err1 := strconv.ParseUint(id[0], 16, 32)
		mi, err2 := strconv.ParseUint(id[1], 16, 32)
		if err1 == nil && err2 == nil && (uint32(ma) != major || uint32(mi) != minor) {
			continue // the same inode number on another device
		}
		pid, _ = strconv.Atoi(fields[4])
		return pid, true, true
	}
	return 0, false, sc.Err() == nil
}
