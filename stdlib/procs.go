package stdlib

import (
	"bytes"
	"encoding/binary"
	"strconv"
)

// Processes are found by a tag in their environment, an entry NAME=value
// that every process of an attempt (or of an apollo.exec command) inherits:
// on Linux from /proc, on macOS through sysctl (procs_linux.go,
// procs_darwin.go). The engine's crash recovery and apollo.exec share these.

// FindTagged lists the live processes, other than this one, whose
// environment holds entry ("NAME=value"). Where processes cannot be read
// (neither Linux nor macOS) it finds none.
func FindTagged(entry string) []int { return findTagged(entry) }

// hasEnvEntry reports whether environ, NUL-separated "NAME=value" entries,
// holds entry.
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

// procStat is what apollo reads of /proc/<pid>/stat (proc(5)).
type procStat struct {
	// State is R (running), S (sleeping), Z (zombie: exited, not yet
	// reaped), X (dead), and so on.
	State byte
	// Pgrp is the process group.
	Pgrp int
	// Flags are the kernel's flags of the process (PF_*).
	Flags uint64
	// EnvEnd is where the environment ends in the process's memory: 0 for a kernel
	// thread, and for a process between an exec's new memory and its new environment.
	EnvEnd uint64
}

// pfKthread is the flag of a kernel thread, which has no environment at all.
const pfKthread = 0x00200000

// settingUpExec reports whether the process is inside an exec, past the point where its old
// memory (and so its environment) was replaced and before the new environment is written:
// its environment reads as empty for that moment, though it holds one.
func (s procStat) settingUpExec() bool {
	return !s.exited() && s.Flags&pfKthread == 0 && s.EnvEnd == 0
}

// exited reports whether the state is a process that has exited and only
// waits to be reaped: it holds nothing and needs no ending.
func (s procStat) exited() bool { return s.State == 'Z' || s.State == 'X' }

// parseProcStat parses /proc/<pid>/stat, "pid (comm) state ppid pgrp ...":
// the one reader of that format. The command name may hold anything, spaces
// and parentheses too, so fields count from its last ')'. It reports false
// when b is not of that form.
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
	st := procStat{State: f[0][0], Pgrp: pgrp}
	// Later fields are read when present: flags is the 9th field, env_end the 51st.
	if len(f) > 6 {
		st.Flags, _ = strconv.ParseUint(string(f[6]), 10, 64)
	}
	if len(f) > 48 {
		st.EnvEnd, _ = strconv.ParseUint(string(f[48]), 10, 64)
	} else {
		st.EnvEnd = 1 // an older kernel: not told, so never taken for an exec under way
	}
	return st, true
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
