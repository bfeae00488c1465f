package executor

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// sZomb is SZOMB of <sys/proc.h>, a kinfo_proc's p_stat for a process that
// has exited and waits to be reaped.
const sZomb = 5

// findTagged lists the pids whose environment carries AttemptEnv=token. It
// reads each process's environment at exec (as Linux's /proc/<pid>/environ
// gives it) through the kern.procargs2 sysctl, which the kernel answers
// for the caller's own user's processes only (for every process to root):
// those are the ones the runner started, so they are listed alone.
func findTagged(token string) []int {
	name, args := "kern.proc.uid", []int{os.Geteuid()}
	if args[0] == 0 {
		name, args = "kern.proc.all", nil
	}
	procs, err := unix.SysctlKinfoProcSlice(name, args...)
	if err != nil {
		return nil
	}
	want := []byte(AttemptEnv + "=" + token + "\x00")
	self := os.Getpid()
	var pids []int
	for i := range procs {
		pid := int(procs[i].Proc.P_pid)
		if pid <= 0 || pid == self || procs[i].Proc.P_stat == sZomb {
			continue
		}
		if buf, err := procArgs(pid); err == nil && hasTag(procargsEnv(buf), want) {
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
