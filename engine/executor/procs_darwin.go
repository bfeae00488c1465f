package executor

import (
	"golang.org/x/sys/unix"
)

// sZomb is SZOMB of <sys/proc.h>, a kinfo_proc's p_stat for a process that
// has exited and waits to be reaped.
const sZomb = 5

// exited reports whether child pid has exited, without reaping it: it is a
// zombie, or gone. macOS has no pidfd, and x/sys/unix no waitid(2) there;
// bodyPipes asks this every bodyPollEvery.
func exited(pid int) bool {
	procs, err := unix.SysctlKinfoProcSlice("kern.proc.pid", pid)
	if err != nil {
		return false // ask again: a wrong yes would stop reading a running body's output
	}
	return len(procs) == 0 || procs[0].Proc.P_stat == sZomb
}

// inFolder says false: macOS has no /proc/<pid>/cwd, and x/sys/unix does
// not reach proc_pidinfo(2), which would give the folder. A shell started
// ahead is then never used: the step starts its shell afresh, which is
// correct, only slower.
func inFolder(pid int, dir string) bool { return false }
