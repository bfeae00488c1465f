package stdlib

import (
	"os"
	"strconv"
	"time"
)

// groupHasLiveMember reports whether process group pgid has a member that has not exited,
// from /proc: a member that exited stays a zombie until init reaps it, which some inits are
// slow to do (or never do); it holds nothing and is not waited for.
func groupHasLiveMember(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readProcStat(pid); ok && st.Pgrp == pgid && !st.exited() {
			return true
		}
	}
	return false
}

// findTagged lists the live processes, other than this one, whose environment holds the
// variable entry ("NAME=value"), from /proc/<pid>/environ.
func findTagged(entry string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := readEnviron(pid)
		if err != nil || !hasEnvEntry(env, entry) {
			continue
		}
		if st, ok := readProcStat(pid); ok && !st.exited() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// execSetUpWait bounds how long readEnviron waits for a process inside an exec to write
// its new environment.
const execSetUpWait = 200 * time.Millisecond

// readEnviron reads /proc/<pid>/environ. A process caught inside an exec, after its memory
// was replaced and before its environment was written (a tagged `exec sleep 100` at the
// moment its command ended), reads as empty: it is read again until it holds its
// environment, for at most execSetUpWait.
func readEnviron(pid int) ([]byte, error) {
	name := "/proc/" + strconv.Itoa(pid) + "/environ"
	deadline := time.Now().Add(execSetUpWait)
	for {
		env, err := os.ReadFile(name)
		if err != nil || len(env) > 0 || time.Now().After(deadline) {
			return env, err
		}
		if st, ok := readProcStat(pid); !ok || !st.settingUpExec() {
			// The exec may have written the environment between the two reads.
			return os.ReadFile(name)
		}
		time.Sleep(time.Millisecond)
	}
}

// readProcStat reads and parses /proc/<pid>/stat; false when pid is gone.
func readProcStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	return parseProcStat(b)
}
