package luaproc

import (
	"bufio"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// setDataLimit sets the soft RLIMIT_DATA to the data segment the process
// has now plus extra bytes (no higher than the hard limit). RLIMIT_DATA
// (Linux 4.7 and later) counts the private writable mappings, which is
// where the Go heap lives, and not the address space the runtime only
// reserves, which RLIMIT_AS would (over a GiB before any work). The hard
// limit is left alone, so that a later job may have a larger limit; Lua
// cannot call setrlimit. Failure is ignored: the meter still bounds the job.
// An extra of math.MaxUint64 lifts it to the hard limit.
func setDataLimit(extra uint64) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_DATA, &rl); err != nil {
		return
	}
	if extra == math.MaxUint64 {
		rl.Cur = rl.Max
		unix.Setrlimit(unix.RLIMIT_DATA, &rl)
		return
	}
	data := vmData()
	if data == 0 {
		return
	}
	rl.Cur = min(data+extra, rl.Max)
	unix.Setrlimit(unix.RLIMIT_DATA, &rl)
}

// vmData returns the process's data segment (VmData), or 0.
func vmData() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmData:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// dataLimitMu serialises WithoutDataLimit.
var dataLimitMu sync.Mutex

// WithoutDataLimit runs fn with the soft RLIMIT_DATA raised to the hard
// limit, and sets it back after: for starting a command (a fork inherits
// the limit) that must not be bound by the job's. While fn runs the job's
// code waits for it (a Lua state blocks in the call that starts the
// command), so nothing else grows the process meanwhile; the heap meter
// keeps watching.
func WithoutDataLimit(fn func() error) error {
	dataLimitMu.Lock()
	defer dataLimitMu.Unlock()
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_DATA, &rl); err != nil || rl.Cur == rl.Max {
		return fn()
	}
	lowered := rl.Cur
	rl.Cur = rl.Max
	if err := unix.Setrlimit(unix.RLIMIT_DATA, &rl); err != nil {
		return fn()
	}
	defer func() {
		rl.Cur = lowered
		unix.Setrlimit(unix.RLIMIT_DATA, &rl)
	}()
	return fn()
}
