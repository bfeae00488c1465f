package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Shell names that shell: accepts as one word (docs/spec.md §2). Any other
// value is an explicit command line of two words or more.
const (
	// ShellSh is the default: /bin/sh -c with errexit, and pipefail where
	// the shell has it. Step.Shell is nil for it.
	ShellSh = "sh"
	// ShellBash is bash -e -o pipefail -c.
	ShellBash = "bash"
)

// shell decodes shell: a shell name, or an explicit command line as one
// string (split at spaces) or a list of words.
func (si *stepInfo) shell(kv keyValue) {
	v := deref(kv.v)
	var words []string
	switch {
	case v.Kind == yaml.SequenceNode:
		items, _ := si.at.list(kv.key, "words", v)
		if len(items) == 0 {
			si.at.errf(v.Line, "shell is empty; give sh, bash or a command line such as \"python3 -c\"")
			return
		}
		for _, item := range items {
			w, ok := si.at.nonEmpty(kv.key, item)
			if !ok {
				return
			}
			words = append(words, w)
		}
	case v.Kind == yaml.MappingNode:
		si.at.errf(v.Line, "shell must be a string or a list of words, not %s", describe(v))
		return
	default:
		s, ok := si.at.nonEmpty(kv.key, v)
		if !ok {
			return
		}
		words = strings.Fields(s)
	}
	if len(words) == 1 {
		switch words[0] {
		case ShellSh:
			si.s.Shell = nil
			return
		case ShellBash:
			si.s.Shell = words
			return
		}
		si.at.errf(v.Line, "shell: %q is not a shell name apollo knows (sh, bash); to run the body with another program, "+
			"write its command line, which gets the body as its last argument: %q", snippet(words[0]), words[0]+" -c")
		return
	}
	si.s.Shell = words
}

// ShellText is shell (a Step.Shell) as a pipeline would write it: "sh" for
// the default, the words of a command line separated by spaces (a word
// that holds a space or a quote is quoted).
func ShellText(shell []string) string {
	if len(shell) == 0 {
		return ShellSh
	}
	words := make([]string, len(shell))
	for i, w := range shell {
		if w == "" || strings.ContainsAny(w, " \t\n\"'\\") {
			w = strconv.Quote(w)
		}
		words[i] = w
	}
	return strings.Join(words, " ")
}

// FindShell returns why the program of shell (a Step.Shell) cannot be run
// by a body that runs in dir, or nil: a name is looked for on the PATH, a
// path (relative to dir) must be an executable file. The default, /bin/sh,
// is always there.
func FindShell(shell []string, dir string) error {
	if len(shell) == 0 {
		return nil
	}
	prog := shell[0]
	if !strings.Contains(prog, "/") {
		if _, err := exec.LookPath(prog); err != nil {
			return fmt.Errorf("%q is not found on the PATH; install it or name it by its path", prog)
		}
		return nil
	}
	path := prog
	if !filepath.IsAbs(path) {
		path = filepath.Join(dir, path)
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%q does not exist (a relative path is relative to where the step runs, %s)", prog, dir)
	case err != nil:
		return fmt.Errorf("%q cannot be read: %s", prog, pathCause(err))
	case fi.IsDir() || fi.Mode()&0o111 == 0:
		return fmt.Errorf("%q is not an executable file", prog)
	}
	return nil
}

// checkShells checks, once per place it is written, that the interpreter
// of each step's shell bodies exists here. A step with a pool runs on a
// hub's worker, which checks before each attempt instead.
func (l *loader) checkShells() {
	seen := map[int]bool{}
	for _, si := range l.steps {
		s := si.s
		if s.Shell == nil || s.Pool != "" {
			continue
		}
		at, line, ok := si.at, 0, false
		if line, ok = si.lineOf("shell"); !ok {
			at, line = l.top(), 0
			if l.def != nil {
				line, _ = l.def.lineOf("shell")
			}
		}
		if seen[line] {
			continue
		}
		seen[line] = true
		if err := FindShell(s.Shell, l.stepDir(s)); err != nil {
			at.errf(line, "shell: %v", err)
		}
	}
}

// stepDir is the folder a shell body of s runs in: its working_dir, else
// the workspace.
func (l *loader) stepDir(s *Step) string {
	switch {
	case s.WorkingDir != "" && filepath.IsAbs(s.WorkingDir):
		return s.WorkingDir
	case s.WorkingDir != "":
		return filepath.Join(l.p.Dir, s.WorkingDir)
	case l.opts.Workdir != "":
		return l.opts.Workdir
	}
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	return dir
}
