package pipeline

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"apollo/engine/template"
)

// A run: step runs another pipeline file as a task of its own (docs/spec.md
// §2.11). The loader checks it as far as a file can be checked before
// anything runs: the file exists and loads (its own problems are listed
// with its own file:line), no chain of run: steps leads back to a file on
// the way (a.yaml -> b.yaml -> a.yaml), and each with: key is a variable
// the sub-pipeline reads.

// runRef is a run: step, checked by checkRuns once the file is read.
type runRef struct {
	si   *stepInfo
	line int
}

// subPipeline decodes run: a .yaml or .yml file inside the pipeline's
// folder.
func (si *stepInfo) subPipeline(kv keyValue) {
	s, ok := si.at.nonEmpty(kv.key, kv.v)
	if !ok {
		return
	}
	line := deref(kv.v).Line
	if ext := filepath.Ext(s); ext != ".yaml" && ext != ".yml" {
		si.at.errf(line, "run %q must name a pipeline file (.yaml or .yml) to run as a sub-pipeline; a shell command is written command:", snippet(s))
		return
	}
	if msg := localPath(s, pipelineFolder); msg != "" {
		si.at.errf(line, "run %q %s", snippet(s), msg)
		return
	}
	si.s.Run = filepath.Clean(s)
	si.l.runRefs = append(si.l.runRefs, runRef{si: si, line: line})
}

// runKeysRefused are the step keys a run: step does not take: the
// sub-pipeline's own steps have their bodies, environments and cleanups.
var runKeysRefused = []string{"env", "memory_mb", "isolation", "allow", "working_dir", "cleanup_command", "cleanup_lua", "cleanup_script"}

// checkRunShape checks the keys of a run: step against each other: with:
// holds the sub-pipeline's variables, so its values are text.
func (l *loader) checkRunShape(si *stepInfo) {
	for _, k := range runKeysRefused {
		if line, ok := si.lineOf(k); ok {
			si.at.errf(line, "%s does not apply to a run step: the sub-pipeline's steps set their own; remove it", k)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(si.s.With)) {
		switch si.s.With[k].(type) {
		case string, int, float64, bool:
		default:
			si.at.errf(si.withLine(k), "with.%s: a run step's with: sets variables of the sub-pipeline, which are text; give a string, a number or a boolean", snippet(k))
		}
	}
}

// withLine is the line of key k of the step's with:, else of with: itself.
func (si *stepInfo) withLine(k string) int {
	if line, ok := si.withLines[k]; ok {
		return line
	}
	line, _ := si.lineOf("with")
	return line
}

// RunPath is the path of a run: step's pipeline file: relative to the
// parent pipeline's folder, joined to the parent's path as given (so that a
// relative parent path gives a relative child path).
func RunPath(parent *Pipeline, s *Step) string {
	return filepath.Join(filepath.Dir(parent.Path), s.Run)
}

// checkRuns loads the sub-pipeline of each run: step, as apollo run will.
func (l *loader) checkRuns() {
	if len(l.runRefs) == 0 {
		return
	}
	self := filepath.Join(l.p.Dir, filepath.Base(l.p.Path))
	within := append(slices.Clip(l.opts.within), self)
	loaded := map[string]*Pipeline{} // by absolute path; nil when it has problems
	for _, r := range l.runRefs {
		s, at := r.si.s, r.si.at
		abs := filepath.Join(l.p.Dir, s.Run)
		if i := indexSameFile(within, abs); i >= 0 {
			chain := make([]string, 0, len(within)-i+1)
			for _, f := range within[i:] {
				chain = append(chain, l.relName(f))
			}
			last := l.relName(abs)
			if abs != within[i] {
				last += " (" + l.relName(within[i]) + ", through a symbolic link)"
			}
			chain = append(chain, last)
			at.errf(r.line, "run %q is a cycle of sub-pipelines: %s; a pipeline cannot run itself, directly or not", s.Run, strings.Join(chain, " -> "))
			continue
		}
		child, done := loaded[abs]
		if !done {
			fi, err := os.Stat(abs)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				at.errf(r.line, "run %q does not exist (it is relative to the pipeline's folder); create it or fix the path", s.Run)
				loaded[abs] = nil
				continue
			case err != nil:
				at.errf(r.line, "run %q cannot be read: %s", s.Run, pathCause(err))
				loaded[abs] = nil
				continue
			case fi.IsDir():
				at.errf(r.line, "run %q is a folder; name a pipeline file", s.Run)
				loaded[abs] = nil
				continue
			}
			// The with: keys are the sub-pipeline's --var: its
			// placeholders may name them. Whether it reads each is
			// checkWithVars's to say, with the line of this file.
			opts := l.opts
			opts.Vars, opts.within = withVars(s), within
			child, err = loadChild(RunPath(l.p, s), abs, opts)
			if err != nil {
				n := l.adopt(err)
				at.errf(r.line, "run %q: the sub-pipeline has %d problem(s), listed below with its file and lines", s.Run, n)
				child = nil
			}
			loaded[abs] = child
		}
		if child == nil {
			continue
		}
		l.checkWithVars(r, child)
	}
}

// indexSameFile returns the index of the first of files that is path,
// compared once symbolic links are resolved (so that loop/s.yaml, where
// loop -> ., is s.yaml), or -1.
func indexSameFile(files []string, path string) int {
	if i := slices.Index(files, path); i >= 0 {
		return i
	}
	real := RealPath(path)
	return slices.IndexFunc(files, func(f string) bool { return RealPath(f) == real })
}

// RealPath is path with its symbolic links resolved, for comparing
// pipeline files; path itself when it cannot be resolved (it does not
// exist, say: that is reported where the file is read).
func RealPath(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		return real
	}
	return filepath.Clean(path)
}

// loadChild is Load without its check of the --var names, which
// checkWithVars makes instead.
func loadChild(path, abs string, opts LoadOptions) (*Pipeline, error) {
	src, err := readPipeline(path)
	if err != nil {
		return nil, err
	}
	return parse(path, filepath.Dir(abs), src, opts)
}

// adopt keeps the problems of a sub-pipeline's load, with their own file
// and lines, and returns how many there are.
func (l *loader) adopt(err error) int {
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	n := 0
	for _, e := range errs {
		if pe, ok := errors.AsType[*Error](e); ok {
			l.probs.others = append(l.probs.others, pe)
		} else {
			l.probs.others = append(l.probs.others, &Error{File: l.p.Path, Msg: e.Error(), err: e})
		}
		n++
	}
	return n
}

// relName names a pipeline file in messages: relative to this pipeline's
// folder when it lies inside it, else by its base name.
func (l *loader) relName(abs string) string {
	if rel, err := filepath.Rel(l.p.Dir, abs); err == nil && filepath.IsLocal(rel) {
		return rel
	}
	return filepath.Base(abs)
}

// checkWithVars reports a with: key that the sub-pipeline would not read:
// neither declared under its vars: nor used by one of its placeholders.
// task_date may be passed; the other built-ins are set by apollo.
func (l *loader) checkWithVars(r runRef, child *Pipeline) {
	s, at := r.si.s, r.si.at
	used := templateNames(child)
	for _, k := range slices.Sorted(maps.Keys(s.With)) {
		line := r.si.withLine(k)
		_, declared := child.Vars[k]
		switch {
		case k == "task_date", declared, used[k] && !slices.Contains(template.BuiltinVars(), k):
		case slices.Contains(template.BuiltinVars(), k):
			at.errf(line, "with.%s: %s is built in and set by apollo for the sub-pipeline; it cannot be passed", k, k)
		default:
			at.errf(line, "with.%s: %s declares no variable %q and uses no {{%s}}%s", snippet(k), s.Run, snippet(k), snippet(k),
				l.hint(k, slices.Sorted(maps.Keys(child.Vars))))
		}
	}
}

// ChildTaskID is the task id of the sub-pipeline that step stepID runs in
// task parentID: "<parent task id>~<step id>", bytes a task id cannot
// hold (the brackets of a foreach instance) written "_". The "~"
// (statedir.ChildSep) is one a task id a user chooses may not hold: the
// tasks of sub-pipelines are a namespace of their own. (apollo before it
// joined them with ".", as in p.load; such logs stay readable as the
// tasks they name.)
func ChildTaskID(parentID, stepID string) string {
	b := []byte(stepID)
	for i, c := range b {
		if !isNameChar(int(c)) && c != '-' && c != '.' {
			b[i] = '_'
		}
	}
	return parentID + "~" + string(b)
}

// LoadRun loads the sub-pipeline of run: step s of parent as validation
// does, its with: keys known as variables, without checking what it names
// outside its file: for apollo graph.
func LoadRun(parent *Pipeline, s *Step) (*Pipeline, error) {
	return loadChild(RunPath(parent, s), filepath.Join(parent.Dir, s.Run), LoadOptions{Vars: withVars(s)})
}

// withVars are the with: keys of run: step s as a sub-pipeline's --var
// names, for its load: its placeholders may name them.
func withVars(s *Step) map[string]string {
	vars := make(map[string]string, len(s.With))
	for k := range s.With {
		vars[k] = ""
	}
	return vars
}

// RunVars returns the variables p is run with as a sub-pipeline: the
// inherited ones (its parent task's) that it declares under vars: (and
// task_date), then its with: values. Without a parent (inherited nil),
// they are with alone: a top-level run's --var values.
func (p *Pipeline) RunVars(inherited, with map[string]string) map[string]string {
	if inherited == nil {
		return with
	}
	vars := map[string]string{}
	for k, v := range inherited {
		if _, declared := p.Vars[k]; declared || k == "task_date" {
			vars[k] = v
		}
	}
	maps.Copy(vars, with)
	return vars
}
