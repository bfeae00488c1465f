package executor

import (
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// A body that is one plain command — `python3 load.py 2026-12-05`,
// `./build.sh`, `true` — means the same to /bin/sh as the program run
// with those words, so it can run without a shell, as make runs such a
// recipe line, without the shell's own start (its exec, its dynamic
// loading, its start-up: most of what a short step costs). Its process cannot be held before the
// body as a shell is (heldCommand), so it starts only once Started has
// returned, and the caller finds it by its AttemptEnv tag, and its group
// (the program leads it), until Running names the group.

// plainWord reports whether every byte of w is one /bin/sh takes literally
// in an unquoted word: no expansion, quoting, globbing, redirection,
// comment or separator can come of it.
func plainWord(w string) bool {
	for i := 0; i < len(w); i++ {
		c := w[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("-_./:=,+@%", c) >= 0:
		default:
			return false
		}
	}
	return w != ""
}

// shellWords are the first words that /bin/sh takes as its own — reserved
// words and builtins — except true and false, which a program on the PATH
// does the same as the builtin.
var shellWords = map[string]bool{
	"!": true, ".": true, ":": true, "[": true, "alias": true, "bg": true, "break": true, "case": true,
	"cd": true, "command": true, "continue": true, "do": true, "done": true, "echo": true, "elif": true,
	"else": true, "esac": true, "eval": true, "exec": true, "exit": true, "export": true, "fc": true,
	"fg": true, "fi": true, "for": true, "function": true, "getopts": true, "hash": true, "if": true,
	"in": true, "jobs": true, "kill": true, "local": true, "printf": true, "pwd": true, "read": true,
	"readonly": true, "return": true, "select": true, "set": true, "shift": true, "source": true,
	"test": true, "then": true, "time": true, "times": true, "trap": true, "type": true, "ulimit": true,
	"umask": true, "unalias": true, "unset": true, "until": true, "wait": true, "while": true,
}

// directCommand returns the program and words of a's body when /bin/sh
// would run it as one plain command: the default shell, one line of plain
// words, the first neither a variable assignment nor one of the shell's
// own words, and naming a program that a's PATH finds (or a path, taken
// from a's folder) — the program that shell would run.
func directCommand(a *Attempt) (string, []string, bool) {
	if a.shell() != nil || a.Command == "" {
		return "", nil, false
	}
	words := strings.FieldsFunc(strings.TrimRight(a.Command, " \t\n"), func(r rune) bool { return r == ' ' || r == '\t' })
	if len(words) == 0 || strings.ContainsAny(words[0], "=%") || shellWords[words[0]] {
		return "", nil, false
	}
	for _, w := range words {
		if !plainWord(w) {
			return "", nil, false
		}
	}
	prog, ok := findProgram(words[0], a.Env, a.Dir)
	return prog, words, ok
}

// findProgram finds name as /bin/sh would in env's PATH, relative entries
// and a name with a slash taken from dir: an executable regular file.
func findProgram(name string, env []string, dir string) (string, bool) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	if strings.Contains(name, "/") {
		p := abs(name)
		return p, executable(p)
	}
	path, found := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path, found = v, true // the last one counts, as a shell's environment has it
		}
	}
	if !found {
		return "", false // the shell's default PATH is its own
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			d = "."
		}
		if p := filepath.Join(abs(d), name); executable(p) {
			return p, true
		}
	}
	return "", false
}

// executable reports whether p is a regular file this process may execute.
// It runs for every PATH entry a step's program is looked for in, so it
// allocates nothing.
func executable(p string) bool {
	var st unix.Stat_t
	return unix.Stat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && unix.Access(p, unix.X_OK) == nil
}

// startDirect starts prog with words as a's body, at once.
func startDirect(a *Attempt, prog string, words []string) (*heldShell, error) {
	return startBody(a, &exec.Cmd{Path: prog, Args: words})
}
