package executor

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
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
	pids := findTagged(token)
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
		if len(findTagged(token)) == 0 {
			return len(pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
	pids = findTagged(token)
	signal(syscall.SIGKILL)
	return len(pids)
}

// hasTag reports whether env, a process's environment as NUL-terminated
// KEY=VALUE entries, holds want (the tag's entry, NUL included); the last
// entry may lack its NUL.
func hasTag(env, want []byte) bool {
	return bytes.Contains(env, want) || bytes.HasSuffix(env, want[:len(want)-1])
}

// procStat is what apollo reads of /proc/<pid>/stat (proc(5)).
type procStat struct {
	// State is R (running), S (sleeping), Z (zombie: exited, not yet
	// reaped), X (dead), and so on.
	State byte
	// Pgrp is the process group.
	Pgrp int
}

// parseProcStat parses /proc/<pid>/stat, "pid (comm) state ppid pgrp ...".
// It is the one reader of that format in the engine. The command name may
// hold anything, spaces and parentheses too, so fields count from its last
// ')'. It reports false when b is not of that form.
func parseProcStat(b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return procStat{}, false
	}
	pgrp, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return procStat{}, false
	}
	return procStat{State: f[0][0], Pgrp: pgrp}, true
}

// procargsEnv returns the environment part of a macOS kern.procargs2
// sysctl's answer: argc (a 32-bit integer), the executable's path, NUL
// padding, argc NUL-terminated arguments, then the environment's entries,
// each NUL-terminated (followed by an empty entry and the system's own
// key=value strings, harmless to a search for one exact entry). It returns
// nil when buf is not of that form.
func procargsEnv(buf []byte) []byte {
	if len(buf) < 4 {
		return nil
	}
	argc := int(binary.NativeEndian.Uint32(buf))
	rest := buf[4:]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return nil
	}
	rest = bytes.TrimLeft(rest[i:], "\x00")
	for range argc {
		i := bytes.IndexByte(rest, 0)
		if i < 0 {
			return nil
		}
		rest = rest[i+1:]
	}
	return rest
}
