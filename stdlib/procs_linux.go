package stdlib

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// groupHasLiveMember reports whether process group pgid has a member that has not exited,
// from /proc: a member that exited stays a zombie until init reaps it, which some inits are
// slow to do (or never do); it holds nothing and is not waited for. Without /proc, any
// member counts.
func groupHasLiveMember(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return true
	}
	want := strconv.Itoa(pgid)
	for _, e := range entries {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold anything, so split after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) >= 3 && f[2] == want && f[0] != "Z" && f[0] != "X" {
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
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil || !hasEnvEntry(env, entry) {
			continue
		}
		if !zombie(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// zombie reports whether pid has exited (or is gone) and only waits to be reaped.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// hasEnvEntry reports whether environ, NUL-separated "NAME=value" entries, holds entry.
func hasEnvEntry(environ []byte, entry string) bool {
	for len(environ) > 0 {
		var e []byte
		e, environ, _ = bytes.Cut(environ, []byte{0})
		if string(e) == entry {
			return true
		}
	}
	return false
}
