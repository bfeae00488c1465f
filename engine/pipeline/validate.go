package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
	"gopkg.in/yaml.v3"

	"apollo/engine/template"
	"apollo/luart"
	"apollo/stdlib"
)

// validName reports whether s is non-empty and holds only ASCII letters,
// digits, "_", "-" and the bytes in extra.
func validName(s, extra string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isNameChar(int(c)) && c != '-' && strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// validModuleName matches [A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*.
func validModuleName(s string) bool {
	for part := range strings.SplitSeq(s, ".") {
		if part == "" {
			return false
		}
		for i := 0; i < len(part); i++ {
			if !isNameChar(int(part[i])) {
				return false
			}
		}
	}
	return true
}

// pipelineFolder is what messages call the folder of the pipeline file.
const pipelineFolder = "the pipeline's folder"

// localPath returns what is wrong with a path that must stay inside a
// folder, which messages call base ("the pipeline's folder"), or "".
func localPath(p, base string) string {
	if filepath.IsAbs(p) || strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\`) {
		return "must be relative to " + base + ", not absolute"
	}
	if !filepath.IsLocal(p) {
		return "leaves " + base + "; keep it inside"
	}
	return ""
}

// setKnown computes the template variables a step may use.
func (l *loader) setKnown() {
	l.known = map[string]bool{}
	l.knownList = nil
	add := func(names []string) {
		slices.Sort(names)
		for _, n := range names {
			if !l.known[n] {
				l.known[n] = true
				l.knownList = append(l.knownList, n)
			}
		}
	}
	add(template.BuiltinVars())
	var vars, opts []string
	for k := range l.p.Vars {
		vars = append(vars, k)
	}
	for k := range l.opts.Vars {
		opts = append(opts, k)
	}
	add(vars)
	add(opts)
}

// template checks a template held by node n: its placeholders, their
// variables and, for a shell command, their contexts.
func (w where) template(key string, n *yaml.Node, s string, shell bool) {
	segs, err := template.Parse(s)
	if err != nil {
		var te *template.Error
		errors.As(err, &te) // Parse's errors are all *template.Error
		w.errf(lineIn(n, s, te.Offset), "%s: %s", key, te.Msg)
		return
	}
	reported := map[string]bool{}
	for _, sg := range segs {
		if sg.Name == "" || w.l.known[sg.Name] || reported[sg.Name] {
			continue
		}
		if template.TriggerRef(sg.Name) {
			w.triggerRef(key, sg.Name, lineIn(n, s, sg.Offset))
			continue
		}
		if step, _, ok := template.OutputRef(sg.Name); ok {
			w.outputRef(key, step, "{{"+sg.Name+"}}", lineIn(n, s, sg.Offset))
			continue
		}
		if _, isAxis := template.ItemRef(sg.Name); isAxis || sg.Name == "item" {
			if w.si == nil {
				w.errf(lineIn(n, s, sg.Offset), "%s: {{%s}} is the item of a foreach or matrix step, not known here", key, sg.Name)
			} else {
				w.si.itemRefs = append(w.si.itemRefs, itemRef{key: key, name: sg.Name, line: lineIn(n, s, sg.Offset)})
			}
			continue
		}
		reported[sg.Name] = true
		hint := w.l.hint(sg.Name, w.l.knownList)
		if hint == "" {
			hint = fmt.Sprintf("; define it under vars: or pass --var %s=VALUE", sg.Name)
		}
		w.errf(lineIn(n, s, sg.Offset), "%s: unknown template variable {{%s}}%s", key, sg.Name, hint)
	}
	if !shell {
		return
	}
	if err := template.CheckShell(segs); err != nil {
		var te *template.Error
		errors.As(err, &te) // CheckShell's errors are all *template.Error
		w.errf(lineIn(n, s, te.Offset), "%s: %s", key, te.Msg)
	}
}

// lineIn is the line of byte off of s, the value of n: exact for a literal
// block (|), else the line where the value starts.
func lineIn(n *yaml.Node, s string, off int) int {
	if n.Style&yaml.LiteralStyle != 0 && off <= len(s) {
		return n.Line + 1 + strings.Count(s[:off], "\n")
	}
	return n.Line
}

// validate checks what spans steps: ids, dependencies, cycles, resume_from.
func (l *loader) validate() {
	ids := make(map[string]int32, len(l.steps)) // index in l.steps
	order := make([]string, 0, len(l.steps))
	for i, si := range l.steps {
		id := si.s.ID
		if id == "" {
			continue
		}
		if first, dup := ids[id]; dup {
			si.at.errf(si.s.Line, "id is already used on line %d; ids must be unique", l.steps[first].s.Line)
			continue
		}
		ids[id] = int32(i)
		order = append(order, id)
	}
	var listed []string // the dependencies of one step read so far
	var seen map[string]bool
	for _, si := range l.steps {
		if len(si.deps) == 0 {
			continue
		}
		// A short list finds a repeat by scanning; a long one by a map.
		listed = listed[:0]
		if len(si.deps) > 16 {
			seen = make(map[string]bool, len(si.deps))
		} else {
			seen = nil
		}
		twice := func(dep string) bool {
			if seen != nil {
				return seen[dep]
			}
			return slices.Contains(listed, dep)
		}
		si.s.DependsOn = make([]string, 0, len(si.deps))
		si.s.depIdx = make([]int32, 0, len(si.deps))
		for _, dn := range si.deps {
			dep, ok := si.at.text("depends_on", dn)
			if !ok {
				continue
			}
			switch j, known := ids[dep]; {
			case dep == si.s.ID:
				si.at.errf(dn.Line, "depends on itself; remove %q from depends_on", dep)
			case twice(dep):
				si.at.errf(dn.Line, "lists %q twice in depends_on; remove one", dep)
			case !known:
				si.at.errf(dn.Line, "depends on unknown step %q%s", snippet(dep), l.hint(dep, order))
			default:
				si.s.DependsOn = append(si.s.DependsOn, dep)
				si.s.depIdx = append(si.s.depIdx, j)
			}
			if seen != nil {
				seen[dep] = true
			} else {
				listed = append(listed, dep)
			}
		}
		if len(si.s.DependsOn) == 0 {
			si.s.DependsOn, si.s.depIdx = nil, nil // as a step with no depends_on
		}
	}
	l.checkHandlerDeps()
	before := len(l.probs.list)
	l.cycles()
	if len(l.probs.list) == before {
		l.checkOutputRefs(ids) // ancestors are known only in an acyclic graph
	}
	if r := l.p.ResumeFrom; r != "" {
		if _, ok := ids[r]; !ok {
			where{l: l}.errf(l.resumeLine, "resume_from names unknown step %q%s", snippet(r), l.hint(r, order))
		}
	}
}

// cycles reports each dependency cycle once, naming its steps in order.
func (l *loader) cycles() {
	n := len(l.steps)
	pending := make([]int, n)
	// dependents in one flat slice (CSR): those of step j are
	// flat[start[j]:start[j+1]].
	start := make([]int32, n+1)
	for i, si := range l.steps {
		pending[i] = len(si.s.depIdx)
		for _, j := range si.s.depIdx {
			start[j+1]++
		}
	}
	for j := range n {
		start[j+1] += start[j]
	}
	flat := make([]int32, start[n])
	fill := slices.Clone(start[:n])
	for i, si := range l.steps {
		for _, j := range si.s.depIdx {
			flat[fill[j]] = int32(i)
			fill[j]++
		}
	}
	// Kahn: whatever is left waits, directly or not, on a cycle.
	queue := make([]int32, 0, n)
	for i := range n {
		if pending[i] == 0 {
			queue = append(queue, int32(i))
		}
	}
	for head := 0; head < len(queue); head++ {
		v := queue[head]
		for _, d := range flat[start[v]:start[v+1]] {
			if pending[d]--; pending[d] == 0 {
				queue = append(queue, d)
			}
		}
	}
	// Each left step has a left dependency: follow the first until a step
	// repeats. A walk that meets an earlier walk leads to a known cycle.
	walkOf := make([]int, n)
	walk := 0
	for i := range n {
		if pending[i] == 0 || walkOf[i] != 0 {
			continue
		}
		walk++
		var path []int
		pos := map[int]int{}
		v := i
		for walkOf[v] == 0 {
			walkOf[v] = walk
			pos[v] = len(path)
			path = append(path, v)
			for _, d := range l.steps[v].s.depIdx {
				if pending[d] > 0 {
					v = int(d)
					break
				}
			}
		}
		if walkOf[v] != walk {
			continue
		}
		cycle := path[pos[v]:]
		first := slices.Index(cycle, slices.Min(cycle))
		cycle = slices.Concat(cycle[first:], cycle[:first])
		names := make([]string, 0, len(cycle)+1)
		for _, c := range cycle {
			names = append(names, l.steps[c].s.ID)
		}
		names = append(names, names[0])
		head := l.steps[cycle[0]]
		head.at.errf(head.s.Line, "dependency cycle %s (each step depends on the next); remove one of these dependencies", strings.Join(names, " -> "))
	}
}

// ref is something a step names outside the pipeline file.
type ref struct {
	si   *stepInfo
	key  string // script, cleanup_script, uses, lua or cleanup_lua
	line int
	name string // the cleaned path, the module name, or the inline Lua source
	// literal: an inline body written as a literal block (|), whose line n
	// is the line n after line in the pipeline.
	literal bool
	// cut is the YAML comment after an inline body written as a plain
	// scalar ("#t; return n" of `lua: local n = #t; return n`), or "".
	cut string
}

func (l *loader) addRef(si *stepInfo, key string, v *yaml.Node, name string) {
	if l.opts.CheckRefs && name != "" {
		v = deref(v)
		r := ref{si: si, key: key, line: v.Line, name: name, literal: v.Style&yaml.LiteralStyle != 0}
		if v.Style == 0 && (key == "lua" || key == "cleanup_lua") {
			r.cut = v.LineComment
		}
		l.refs = append(l.refs, r)
	}
}

// checkInlineLua reports an inline Lua body that does not compile, at its
// line in the pipeline when the body is a literal block. compiled caches
// the verdict by source: big pipelines repeat their bodies.
func (l *loader) checkInlineLua(r ref, compiled map[string]luaVerdict) {
	v, done := compiled[r.name]
	if !done {
		v.line, v.msg = luart.CheckSyntax(r.name)
		compiled[r.name] = v
	}
	if v.msg == "" {
		if r.cut != "" && luaCut(r.name, r.cut) {
			r.si.at.errf(r.line, "%s was cut by a YAML comment: the Lua read is %q, without %q%s",
				r.key, snippet(r.name), snippet(r.cut), cutHint)
		}
		return
	}
	if r.cut != "" {
		v.msg += fmt.Sprintf("; a YAML comment cut the body before %q%s", snippet(r.cut), cutHint)
	}
	line := v.line
	if last := strings.Count(strings.TrimRight(r.name, "\n"), "\n") + 1; line > last {
		line = last // at <eof>, Lua counts the body's final newline
	}
	switch {
	case r.literal && v.line > 0:
		r.si.at.errf(r.line+line, "%s does not compile: %s", r.key, v.msg)
	case v.line == 1 && !strings.Contains(r.name, "\n"):
		r.si.at.errf(r.line, "%s does not compile: %s", r.key, v.msg)
	case v.line > 0:
		r.si.at.errf(r.line, "%s does not compile: line %d of the body: %s", r.key, v.line, v.msg)
	default:
		r.si.at.errf(r.line, "%s does not compile: %s", r.key, v.msg)
	}
}

// cutHint says why a YAML comment cuts a plain scalar, and what to write.
const cutHint = " (\"#\" after a space starts a comment in a plain YAML scalar); " +
	"write the Lua as a block scalar: \"|\" after the key, the Lua on the lines below"

// luaCut reports whether the comment after a plain-scalar body that
// compiles was most likely Lua: the body and the comment compile together
// (`return #ctx.outputs.rows`), where a real comment would not.
func luaCut(body, comment string) bool {
	_, msg := luart.CheckSyntax(body + " " + comment)
	return msg == ""
}

// luaVerdict is whether a Lua source compiles: where and why not.
type luaVerdict struct {
	line int
	msg  string
}

// LuaRoot is the folder Lua script files are read through (os.Root): the
// workspace, or the pipeline's folder when it lies outside the workspace.
// Chunk names are relative to it, so errors read "steps/load.lua:12: …".
func LuaRoot(workdir, pipelineDir string) string {
	root := workdir
	if abs, err := filepath.Abs(workdir); err == nil {
		root = abs
	}
	if rel, err := filepath.Rel(root, pipelineDir); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return pipelineDir
	}
	return root
}

// checkRefs checks what steps name outside the file as the Lua executor
// will resolve it (lua.go and luart): script files are read through
// luaRoot; a uses module is not a library module (apollo.*), and is
// NAME.lua or NAME/init.lua (dots for folders) in the first modules folder
// that has it, else in the bundled modules. Each problem names the step and
// the line, and says what to do.
func (l *loader) checkRefs() {
	top := where{l: l}
	p := l.p
	var dirs, dirNames []string // the modules folders that exist
	for i, m := range p.Modules {
		dir := filepath.Join(p.Dir, m)
		fi, err := os.Stat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			top.errf(l.moduleLines[i], "modules folder %q does not exist (it is relative to the pipeline's folder); create it or remove it from modules", m)
		case err != nil:
			top.errf(l.moduleLines[i], "modules folder %q cannot be read: %s", m, pathCause(err))
		case !fi.IsDir():
			top.errf(l.moduleLines[i], "modules folder %q is not a folder; name a folder of .lua modules", m)
		default:
			dirs, dirNames = append(dirs, dir), append(dirNames, m)
		}
	}
	l.checkWorkingDirs()
	l.checkShells()
	l.checkRuns()
	if len(l.refs) == 0 {
		return
	}
	root := LuaRoot(l.opts.Workdir, p.Dir)
	library := stdlib.Modules(nil)
	scripts := map[string]luaFile{} // by path
	modules := map[string]luaFile{} // by name
	var known []string              // module names for hints, listed on first need
	compiled := map[string]luaVerdict{}
	req := &requireCheck{l: l, dirs: dirs, dirNames: dirNames, library: library, modules: modules}
	for _, r := range l.refs {
		at := r.si.at
		if r.key == "lua" || r.key == "cleanup_lua" {
			l.checkInlineLua(r, compiled)
			r.si.checkNeeds(r.line, r.key, r.name)
			req.check(r, r.name)
			continue
		}
		if r.key != "uses" {
			f, done := scripts[r.name]
			if !done {
				f = checkScript(root, filepath.Join(p.Dir, r.name))
				if f.msg == errNoScript {
					f.msg = "does not exist (it is relative to the pipeline's folder); create it or fix the path"
					if hint := l.hint(r.name, siblingScripts(p.Dir, r.name)); hint != "" {
						f.msg = "does not exist" + hint
					}
				}
				scripts[r.name] = f
			}
			if f.msg != "" {
				at.errf(r.line, "%s %q %s", r.key, r.name, f.msg)
			}
			r.si.checkNeeds(r.line, fmt.Sprintf("%s %q", r.key, r.name), f.src)
			req.check(r, f.src)
			continue
		}
		if _, ok := library[r.name]; ok {
			at.errf(r.line, "uses %q names a library module, which a Lua body loads with require; uses takes a step module with run(ctx)", r.name)
			continue
		}
		f, done := modules[r.name]
		if !done {
			f = findModule(dirs, dirNames, l.opts.Bundled, r.name)
			modules[r.name] = f
		}
		switch msg := f.msg; msg {
		case "":
			r.si.checkNeeds(r.line, fmt.Sprintf("uses %q", r.name), f.src)
			req.module(r, "uses", r.name, f)
		case errNoModule:
			if known == nil {
				known = moduleNames(dirs, l.opts.Bundled)
			}
			at.errf(r.line, "uses %q: %s", r.name, noModule(r.name, dirNames, l.opts.Bundled != nil, l.hint(r.name, known)))
		default:
			at.errf(r.line, "uses %q: %s", r.name, msg)
		}
	}
}

// luaFile is a script file or module a step names: its source, or what
// is wrong with it.
type luaFile struct {
	src string
	msg string // "" when nothing is wrong
	// path names a module's file for messages: "lib/util.lua", or the
	// bundled module's file.
	path string
}

// requireCheck finds the modules a step's Lua loads by a literal name
// (require("util"), and what those modules require in turn) in the
// pipeline's modules folders, and reports each that does not compile at
// the step that loads it: run would fail there only when the step ran, hours
// in. A name no folder has is left to run time (it may be required under
// pcall, or made by an earlier step).
type requireCheck struct {
	l              *loader
	dirs, dirNames []string
	library        map[string]lua.LGFunction
	modules        map[string]luaFile // by name, shared with checkRefs's uses
	checked        map[string]bool    // module names whose requires were followed
}

// check follows the literal requires of src, the Lua of ref r.
func (c *requireCheck) check(r ref, src string) {
	for _, name := range luart.Requires(src) {
		if _, lib := c.library[name]; lib || !luart.ValidModuleName(name) {
			continue
		}
		f, done := c.modules[name]
		if !done {
			f = findModule(c.dirs, c.dirNames, c.l.opts.Bundled, name)
			c.modules[name] = f
		}
		if f.msg == errNoModule {
			continue
		}
		if f.msg != "" {
			r.si.at.errf(r.line, "require(%q): %s", name, f.msg)
			continue
		}
		c.module(r, "require", name, f)
	}
}

// module checks that module name, found as f for ref r by a uses or a
// require, compiles, then follows its own requires (once per module).
func (c *requireCheck) module(r ref, how, name string, f luaFile) {
	if c.checked == nil {
		c.checked = map[string]bool{}
	}
	if c.checked[name] {
		return
	}
	c.checked[name] = true
	if line, msg := luart.CheckSyntax(f.src); msg != "" {
		at := f.path
		if line > 0 {
			at = fmt.Sprintf("%s:%d", f.path, line)
		}
		if how == "uses" {
			r.si.at.errf(r.line, "uses %q does not compile: %s: %s", name, at, msg)
		} else {
			r.si.at.errf(r.line, "require(%q) does not compile: %s: %s", name, at, msg)
		}
		return
	}
	c.check(r, f.src)
}

// checkScript reads the script file at path through root, as the Lua
// executor will, and says what keeps it from running: it cannot be read,
// or it does not compile ("path:line: what"). A read that fails after the
// open is left for running it to report.
func checkScript(root, file string) luaFile {
	bad := func(format string, args ...any) luaFile { return luaFile{msg: fmt.Sprintf(format, args...)} }
	rel, err := filepath.Rel(root, file)
	if err != nil {
		return bad("cannot be resolved: %v", err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return bad("cannot be read: %s", pathCause(err))
	}
	defer r.Close()
	fi, err := r.Stat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return luaFile{msg: errNoScript}
	case err != nil && escapes(file):
		return bad("leads out of the workspace through a symbolic link; Lua steps read files inside it only")
	case err != nil:
		return bad("cannot be read: %s", pathCause(err))
	case fi.IsDir():
		return bad("is a folder; name a .lua file")
	case !fi.Mode().IsRegular():
		return bad("is not a regular file (%s); name a .lua file", fileKind(fi.Mode()))
	}
	src, err := r.ReadFile(rel)
	if err != nil {
		return luaFile{}
	}
	line, msg := luart.CheckSyntax(string(src))
	chunk := filepath.ToSlash(rel)
	switch {
	case msg == "":
		return luaFile{src: string(src)}
	case line > 0:
		return bad("does not compile: %s:%d: %s", chunk, line, msg)
	}
	return bad("does not compile: %s: %s", chunk, msg)
}

// What checkScript and findModule return when there is no such file.
const (
	errNoScript = "no script"
	errNoModule = "no module"
)

// siblingScripts lists the .lua files next to script (a path relative to
// dir) as paths relative to dir, for hints.
func siblingScripts(dir, script string) []string {
	sub := filepath.Dir(script)
	entries, err := os.ReadDir(filepath.Join(dir, sub))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".lua") {
			names = append(names, filepath.Join(sub, e.Name()))
		}
	}
	return names
}

// findModule looks for module name as luart's require does, after the
// library modules: NAME.lua, then NAME/init.lua, in each of dirs (through
// os.Root: no way out), then in bundled. It returns "" when found,
// errNoModule when not, or what is wrong with the file it found. names are
// the folders as the pipeline writes them.
func findModule(dirs, names []string, bundled fs.FS, name string) luaFile {
	base := strings.ReplaceAll(name, ".", "/")
	candidates := []string{base + ".lua", base + "/init.lua"}
	for i, dir := range dirs {
		r, err := os.OpenRoot(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return luaFile{msg: fmt.Sprintf("modules folder %s cannot be read: %s", names[i], pathCause(err))}
		}
		for _, rel := range candidates {
			fi, err := r.Stat(filepath.FromSlash(rel))
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue
			case err != nil && escapes(filepath.Join(dirs[i], filepath.FromSlash(rel))):
				err = errors.New("it leads out of its folder through a symbolic link")
			case err == nil && !fi.Mode().IsRegular():
				err = errors.New("it is not a regular file")
			}
			var src []byte
			if err == nil {
				src, _ = r.ReadFile(filepath.FromSlash(rel))
			}
			r.Close()
			if err != nil {
				return luaFile{msg: fmt.Sprintf("%s cannot be loaded: %s", path.Join(filepath.ToSlash(names[i]), rel), pathCause(err))}
			}
			return luaFile{src: string(src), path: path.Join(filepath.ToSlash(names[i]), rel)}
		}
		r.Close()
	}
	if bundled != nil {
		for _, rel := range candidates {
			if src, err := fs.ReadFile(bundled, rel); err == nil {
				return luaFile{src: string(src), path: "bundled " + rel}
			}
		}
	}
	return luaFile{msg: errNoModule}
}

// noModule says where a module was looked for, and what to do.
func noModule(name string, dirs []string, bundled bool, hint string) string {
	var where []string
	for _, d := range dirs {
		where = append(where, filepath.ToSlash(d))
	}
	if bundled {
		where = append(where, "the bundled modules")
	}
	file := strings.ReplaceAll(name, ".", "/") + ".lua"
	switch {
	case len(where) == 0:
		return "no such module: the pipeline has no modules folder; add modules: [lib] and lib/" + file
	case hint != "":
		return fmt.Sprintf("no such module in %s%s", orList(where), hint)
	case len(dirs) == 0:
		return fmt.Sprintf("no such module in %s; add modules: [lib] and lib/%s, or fix the name", orList(where), file)
	}
	return fmt.Sprintf("no such module in %s; add %s/%s or fix the name", orList(where), filepath.ToSlash(dirs[0]), file)
}

func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// moduleNames lists the step modules in dirs and bundled, for hints: a
// name.lua file, or a folder with an init.lua, at the top of each.
func moduleNames(dirs []string, bundled fs.FS) []string {
	names := []string{}
	add := func(fsys fs.FS) {
		entries, err := fs.ReadDir(fsys, ".")
		if err != nil {
			return
		}
		for _, e := range entries {
			switch name := e.Name(); {
			case !e.IsDir() && strings.HasSuffix(name, ".lua"):
				names = append(names, strings.TrimSuffix(name, ".lua"))
			case e.IsDir():
				if _, err := fs.Stat(fsys, name+"/init.lua"); err == nil {
					names = append(names, name)
				}
			}
		}
	}
	for _, d := range dirs {
		add(os.DirFS(d))
	}
	if bundled != nil {
		add(bundled)
	}
	return names
}

// pathCause is an error of the file system without the path it repeats.
func pathCause(err error) string {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err.Error()
	}
	return err.Error()
}

// escapes reports whether a path that an os.Root refused to open exists
// outside of it: os.Root refuses a link out of the root with an error of
// no type of its own, so the plain path is looked at instead.
func escapes(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// checkWorkingDirs checks that each working_dir names a folder, once per
// place it is written: under defaults (or at the top level), or on a step.
func (l *loader) checkWorkingDirs() {
	seen := map[string]bool{}
	check := func(at where, line int, dir string) {
		if dir == "" || seen[dir+"\x00"+strconv.Itoa(line)] {
			return
		}
		seen[dir+"\x00"+strconv.Itoa(line)] = true
		path := dir
		if !filepath.IsAbs(path) {
			path = filepath.Join(l.p.Dir, dir)
		}
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			at.errf(line, "working_dir %q does not exist (it is relative to the pipeline's folder, %s); create it or fix the path", dir, l.p.Dir)
		case err != nil:
			at.errf(line, "working_dir %q cannot be read: %s", dir, pathCause(err))
		case !fi.IsDir():
			at.errf(line, "working_dir %q is not a folder", dir)
		}
	}
	defLine := 0
	for _, si := range []*stepInfo{l.def, l.topDir} {
		if si != nil {
			if line, ok := si.lineOf("working_dir"); ok {
				defLine = line
			}
		}
	}
	check(l.top(), defLine, l.p.Defaults.WorkingDir)
	for _, si := range l.steps {
		if line, ok := si.lineOf("working_dir"); ok {
			check(si.at, line, si.s.WorkingDir)
		}
	}
}
