package stdlib

import (
	"encoding/binary"
	"strconv"
	"strings"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	// statLine is a whole line of a current kernel: 52 fields, flags the 9th, env_end the 51st.
	statLine := func(state string, flags, envEnd uint64) string {
		f := make([]string, 52)
		for i := range f {
			f[i] = "0"
		}
		f[0], f[1], f[2], f[4] = "42", "(sleep)", state, "42"
		f[8], f[50] = strconv.FormatUint(flags, 10), strconv.FormatUint(envEnd, 10)
		return strings.Join(f, " ") + "\n"
	}
	for _, c := range []struct {
		in   string
		want procStat
		ok   bool
	}{
		{"1234 (sh) S 1 1234 1234 0 -1 4194560 100\n", procStat{State: 'S', Pgrp: 1234, Flags: 4194560, EnvEnd: 1}, true},
		{"77 (a b) c)) Z 1 70 70 0\n", procStat{State: 'Z', Pgrp: 70, EnvEnd: 1}, true}, // the name holds ") "
		{"9 (x) X 1 -1", procStat{State: 'X', Pgrp: -1, EnvEnd: 1}, true},
		{statLine("S", 4194304, 140735604510699), procStat{State: 'S', Pgrp: 42, Flags: 4194304, EnvEnd: 140735604510699}, true},
		{"9 (x) R 1", procStat{}, false},
		{"9 (x) RS 1 9", procStat{}, false},
		{"9 (x) R 1 p", procStat{}, false},
		{"9 x R 1 9", procStat{}, false},
		{"", procStat{}, false},
	} {
		got, ok := parseProcStat([]byte(c.in))
		if got != c.want || ok != c.ok {
			t.Errorf("parseProcStat(%q) = %+v, %v, want %+v, %v", c.in, got, ok, c.want, c.ok)
		}
	}

	// A process inside an exec has no environment yet, for a moment; a kernel thread never
	// has one; a process that exited needs no ending.
	for _, c := range []struct {
		line string
		want bool
	}{
		{statLine("R", 4194304, 0), true},
		{statLine("S", 4194304, 140735604510699), false},
		{statLine("S", 2129984|pfKthread, 0), false},
		{statLine("Z", 4194304, 0), false},
		{"1234 (sh) S 1 1234 1234 0 -1 4194560 100\n", false},
	} {
		st, _ := parseProcStat([]byte(c.line))
		if got := st.settingUpExec(); got != c.want {
			t.Errorf("settingUpExec of %+v = %v, want %v", st, got, c.want)
		}
	}
}

// procargs builds a kern.procargs2 answer as macOS gives it.
func procargs(path string, argv, env []string) []byte {
	b := binary.NativeEndian.AppendUint32(nil, uint32(len(argv)))
	b = append(b, path...)
	b = append(b, 0, 0, 0, 0) // the path's NUL and padding
	for _, s := range append(argv, env...) {
		b = append(append(b, s...), 0)
	}
	return append(b, "\x00executable_path=/bin/sleep\x00ptr_munge=\x00"...)
}

func TestProcargsEnv(t *testing.T) {
	tag := "APOLLO_ATTEMPT=/s/log.jsonl#a#0"
	for _, c := range []struct {
		name string
		in   []byte
		has  bool
	}{
		{"tagged", procargs("/bin/sleep", []string{"sleep", "30"}, []string{"HOME=/h", tag}), true},
		{"tag first", procargs("/bin/sleep", []string{"sleep"}, []string{tag, "HOME=/h"}), true},
		{"tag in argv only", procargs("/bin/echo", []string{"echo", tag}, []string{"HOME=/h"}), false},
		{"other attempt", procargs("/bin/sh", nil, []string{tag + "1"}), false},
		{"no argv", procargs("/bin/sh", nil, []string{tag}), true},
		{"cut in argv", procargs("/bin/sh", []string{"sh", "-c"}, nil)[:12], false},
		{"short", []byte{1, 0}, false},
	} {
		if got := hasEnvEntry(procargsEnv(c.in), tag); got != c.has {
			t.Errorf("%s: hasEnvEntry(procargsEnv(…)) = %v, want %v (env %q)", c.name, got, c.has, procargsEnv(c.in))
		}
	}
}
