package executor

import (
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"apollo/stdlib"
)

// AttemptEnv is the environment variable that tags every process of an
// attempt, so that a later run can find what a crash left running — even
// processes that left the attempt's process group.
const AttemptEnv = "APOLLO_ATTEMPT"

// AttemptToken names one attempt of one step in one log. The log is named
// by its absolute path: two state directories can hold logs of the same
// name (the same task started in the same second), and a resume in one
// must never end the steps of the other.
func AttemptToken(logPath, stepID string, retry int) string {
	if abs, err := filepath.Abs(logPath); err == nil {
		logPath = abs
	}
	return logPath + "#" + stepID + "#" + strconv.Itoa(retry)
}

// EndLeftovers ends every process of an attempt that outlived the runner
// that started it: SIGTERM to each and to its recorded process group, then
// SIGKILL after grace. It returns how many processes it found.
func EndLeftovers(token string, pgid int, grace time.Duration) int {
	entry := AttemptEnv + "=" + token
	pids := stdlib.FindTagged(entry)
	if len(pids) == 0 {
		return 0
	}
	signal := func(sig syscall.Signal) {
		for _, pid := range pids {
			_ = syscall.Kill(pid, sig)
		}
		// A group is signalled only when a tagged process is in it (after
		// a reboot the recorded number may belong to someone else): the
		// recorded group, and any group a tagged process leads — the
		// attempt's shell leads its group, so this finds it even when the
		// crash came before the record naming it was on disk.
		for _, pid := range pids {
			g, err := syscall.Getpgid(pid)
			if err == nil && g > 0 && (g == pgid || g == pid) {
				_ = syscall.Kill(-g, sig)
			}
		}
	}
	signal(syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if len(stdlib.FindTagged(entry)) == 0 {
			return len(pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pids = stdlib.FindTagged(entry)
	signal(syscall.SIGKILL)
	return len(pids)
}
