package executor

import (
	"os"
	"path/filepath"
	"strconv"
)

// findTagged lists the pids whose environment carries AttemptEnv=token,
// from /proc/<pid>/environ.
func findTagged(token string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	want := []byte(AttemptEnv + "=" + token + "\x00")
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		if hasTag(env, want) && !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// zombie reports whether pid has exited and waits to be reaped: it holds
// nothing and needs no ending.
func zombie(pid int) bool {
	st, ok := readProcStat(pid)
	return !ok || st.State == 'Z' || st.State == 'X' // !ok: gone
}

// readProcStat reads and parses /proc/<pid>/stat.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procStat{}, false
	}
	return parseProcStat(b)
}

// inFolder reports whether process pid's working folder is the one dir
// names now ("" is this process's own).
func inFolder(pid int, dir string) bool {
	cwd, err := os.Stat("/proc/" + strconv.Itoa(pid) + "/cwd")
	if err != nil {
		return false
	}
	if dir == "" {
		dir = "."
	}
	now, err := os.Stat(dir)
	return err == nil && os.SameFile(cwd, now)
}
