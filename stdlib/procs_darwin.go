package stdlib

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// sZomb is SZOMB of <sys/proc.h>, a kinfo_proc's p_stat for a process that
// has exited and waits to be reaped.
const sZomb = 5

// ownProcesses lists the processes of this user (every process, for root):
// the only ones whose environment kern.procargs2 gives, and the ones apollo
// started.
func ownProcesses() ([]unix.KinfoProc, error) {
	name, args := "kern.proc.uid", []int{os.Geteuid()}
	if args[0] == 0 {
		name, args = "kern.proc.all", nil
	}
	return unix.SysctlKinfoProcSlice(name, args...)
}

// groupHasLiveMember reports whether process group pgid has a member that
// has not exited.
func groupHasLiveMember(pgid int) bool {
	procs, err := ownProcesses()
	if err != nil {
		return true
	}
	for i := range procs {
		if int(procs[i].Eproc.Pgid) == pgid && procs[i].Proc.P_stat != sZomb {
			return true
		}
	}
	return false
}

// findTagged lists the live processes, other than this one, whose
// environment holds entry. It reads each process's environment at exec (as
// Linux's /proc/<pid>/environ gives it) through kern.procargs2.
func findTagged(entry string) []int {
	procs, err := ownProcesses()
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for i := range procs {
		pid := int(procs[i].Proc.P_pid)
		if pid <= 0 || pid == self || procs[i].Proc.P_stat == sZomb {
			continue
		}
		if buf, err := procArgs(pid); err == nil && hasEnvEntry(procargsEnv(buf), entry) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procArgs reads pid's kern.procargs2. The kernel fails the copy from a
// process caught in fork, exec or exit with EIO; a moment later it gives
// the answer.
func procArgs(pid int) ([]byte, error) {
	buf, err := unix.SysctlRaw("kern.procargs2", pid)
	for try := 0; try < 3 && err == unix.EIO; try++ {
		time.Sleep(time.Millisecond)
		buf, err = unix.SysctlRaw("kern.procargs2", pid)
	}
	return buf, err
}
