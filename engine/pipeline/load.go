package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"apollo/engine/statedir"
	"apollo/engine/template"
	"apollo/engine/usage"
)

// maxPipelineSize caps the file before it is parsed.
const maxPipelineSize = 10 << 20

// maxAliasNodes caps the nodes that YAML aliases may add to a document
// (a "billion laughs" file expands to billions).
const maxAliasNodes = 100_000

// Limits on numbers, so that no later arithmetic can overflow.
const (
	maxSeconds    = 1e9 // about 31 years
	maxRetryCount = 10000
	maxMemoryMB   = 1 << 20 // 1 TiB
	maxStepIDLen  = 128     // a step id names output files
	// maxTaskNameLen leaves room for "-YYYY-MM-DD" in a task id.
	maxTaskNameLen = statedir.MaxTaskIDLen - len("-2006-01-02")
)

// LoadOptions tunes Load.
type LoadOptions struct {
	// Vars are --var overrides; their names count as known template variables too.
	Vars map[string]string
	// CheckRefs makes Load check, as the Lua executor will look for them,
	// what steps name outside the file: script and cleanup_script files,
	// modules folders and uses modules. apollo validate and run set it, so
	// that a typo fails before anything runs.
	CheckRefs bool
	// Workdir is the workspace, which script files are read through (as
	// Options.Workdir); "" is the current folder.
	Workdir string
	// Bundled holds the bundled step modules that uses may name, searched
	// after the modules folders (as Options.Bundled); nil is none.
	Bundled fs.FS

	// within are the absolute paths of the pipelines whose run: steps led
	// to this one, outermost first: a run: naming one of them is a cycle.
	within []string
}

// Load reads, strictly decodes and validates the pipeline at path. On failure it
// returns every problem at once: an error for which errors.As finds *Error,
// built with errors.Join of *Error values (one per problem, sorted by line).
// A valid pipeline with a --var (opts.Vars) that nothing reads is a *UsageError.
func Load(path string, opts LoadOptions) (*Pipeline, error) {
	src, err := readPipeline(path)
	if err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, &Error{File: path, Msg: fmt.Sprintf("cannot resolve the pipeline's folder: %v", err), err: err}
	}
	p, err := parse(path, dir, src, opts)
	if err != nil {
		return nil, err
	}
	if err := checkVarFlags(p, opts.Vars); err != nil {
		return nil, err
	}
	return p, nil
}

var datePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`) })

// IsDate reports whether s is a real date written YYYY-MM-DD.
func IsDate(s string) bool {
	_, err := time.Parse("2006-01-02", s)
	return err == nil && datePattern().MatchString(s)
}

// checkVarFlags refuses a --var that nothing would read, as a *UsageError:
// a built-in other than task_date (apollo sets those itself), or a name
// neither declared under vars: nor used by any {{placeholder}}. Such a flag
// is most likely a typo, and accepting it would run the task with the
// default value and no word of warning.
func checkVarFlags(p *Pipeline, vars map[string]string) error {
	if len(vars) == 0 {
		return nil
	}
	used := templateNames(p)
	var candidates []string
	for name := range p.Vars {
		candidates = append(candidates, name)
	}
	for name := range used {
		if !slices.Contains(candidates, name) && !slices.Contains(template.BuiltinVars(), name) {
			candidates = append(candidates, name)
		}
	}
	candidates = append(candidates, "task_date")
	slices.Sort(candidates)
	names := make([]string, 0, len(vars))
	for name := range vars {
		names = append(names, name)
	}
	slices.Sort(names)
	var msgs []string
	for _, name := range names {
		_, declared := p.Vars[name]
		switch {
		case name == "task_id":
			msgs = append(msgs, "--var task_id: the task id is set with --task-id, not --var")
		case name != "task_date" && slices.Contains(template.BuiltinVars(), name):
			msgs = append(msgs, fmt.Sprintf("--var %s: %s is built in and set by apollo; it cannot be passed", name, name))
		case template.TriggerRef(name) && len(p.Triggers) > 0 && triggerVarKnown(name): // set by apollo serve
		case !template.ValidName(name):
			msgs = append(msgs, fmt.Sprintf("--var %q: a variable name is letters, digits and _, not starting with a digit", snippet(name)))
		case name == "task_date", declared, used[name]:
		default:
			msg := fmt.Sprintf("--var %s: %s declares no variable %q and uses no {{%s}}", name, p.Path, name, name)
			if s := Suggest(name, candidates); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			} else {
				msg += "; declare it under vars: to pass it to Lua steps (ctx.vars)"
			}
			msgs = append(msgs, msg)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return &usage.Error{Msg: strings.Join(msgs, "\n")}
}

// templateNames returns the variables that p's templates use: in commands,
// cleanup commands, env values and with values.
func templateNames(p *Pipeline) map[string]bool {
	used := map[string]bool{}
	add := func(s string) {
		segs, err := template.Parse(s)
		if err != nil {
			return // reported by validation
		}
		for _, sg := range segs {
			if sg.Name != "" {
				used[sg.Name] = true
			}
		}
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			add(v)
		case map[string]any:
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for _, s := range p.Steps {
		add(s.Command)
		add(s.CleanupCommand)
		for _, v := range s.Env {
			add(v)
		}
		walk(s.With)
	}
	return used
}

// readPipeline reads a regular file of at most maxPipelineSize bytes. It
// stats before opening, so that a FIFO is refused rather than blocking.
func readPipeline(path string) ([]byte, error) {
	fail := func(err error, format string, args ...any) error {
		return &Error{File: path, Msg: fmt.Sprintf(format, args...), err: err}
	}
	cause := func(err error) string {
		if pe, ok := errors.AsType[*fs.PathError](err); ok {
			return pe.Err.Error()
		}
		return err.Error()
	}
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fail(err, "no such file; check the path")
	case err != nil:
		return nil, fail(err, "cannot read the file: %s", cause(err))
	case fi.IsDir():
		return nil, fail(nil, "is a directory; give the path of a pipeline YAML file")
	case !fi.Mode().IsRegular():
		return nil, fail(nil, "is not a regular file (%s); give the path of a pipeline YAML file", fileKind(fi.Mode()))
	case fi.Size() > maxPipelineSize:
		return nil, fail(nil, "is %d bytes; a pipeline file may be at most 10 MiB", fi.Size())
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fail(err, "cannot read the file: %s", cause(err))
	}
	defer f.Close()
	if fi2, err := f.Stat(); err != nil || !os.SameFile(fi, fi2) {
		return nil, fail(err, "the file changed while it was being opened; try again")
	}
	src, err := io.ReadAll(io.LimitReader(f, maxPipelineSize+1))
	if err != nil {
		return nil, fail(err, "cannot read the file: %s", cause(err))
	}
	if len(src) > maxPipelineSize {
		return nil, fail(nil, "is more than 10 MiB; a pipeline file may be at most 10 MiB")
	}
	return src, nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return m.Type().String()
}

// loader turns one YAML document into a Pipeline, collecting problems.
type loader struct {
	probs problems
	opts  LoadOptions
	p     *Pipeline
	steps []*stepInfo
	// lines of the top-level keys that validation refers to
	resumeLine int
	// the steps list, and the handler lists (on_failure:, finally:), read
	// once the top level is
	stepsNode    *yaml.Node
	stepsLine    int
	handlerNodes [2]keyValue
	// what the top level sets for every step: defaults:, env:,
	// working_dir:, and the line of max_retries
	def, topEnv, topDir *stepInfo
	maxRetriesLine      int
	// references to upstream outputs, checked once the graph is known,
	// and to resources, checked once the top level is read
	outputRefs   []outputRef
	resourceRefs []resourceRef
	runRefs      []runRef
	foreachVars  []varRef
	// the lines of secret_vars' items
	secretVarLines []int
	// the password_secret names of notify: email targets
	secretRefs []secretRef
	// the template variables steps may use
	known     map[string]bool
	knownList []string
	// hintBudget caps the candidates compared for did-you-mean hints, so
	// that a file with thousands of unknown names still loads quickly.
	hintBudget int
	// what steps name outside the file, and the lines of the modules
	// folders, for checkRefs
	refs        []ref
	moduleLines []int
	// what newStep hands out
	slabSize int
	infoSlab []stepInfo
	stepSlab []Step
}

// hint is didYouMean within the loader's budget.
func (l *loader) hint(word string, candidates []string) string {
	if l.hintBudget < len(candidates) {
		return ""
	}
	l.hintBudget -= len(candidates)
	return DidYouMean(word, candidates)
}

// where tells problems which step they belong to. A step without a usable
// id is named by its position instead.
type where struct {
	l     *loader
	si    *stepInfo // the step, when problems belong to one
	step  string
	index int // the step's position (1-based), named when step is ""
}

func (w where) errf(line int, format string, args ...any) {
	if w.step == "" && w.index > 0 {
		format = "step " + strconv.Itoa(w.index) + ": " + format
	}
	w.l.probs.add(line, w.step, format, args...)
}

// parse decodes and validates src, the bytes of the pipeline at file.
func parse(file, dir string, src []byte, opts LoadOptions) (*Pipeline, error) {
	l := &loader{probs: problems{file: file}, opts: opts, hintBudget: 200_000}
	top := where{l: l}
	if !l.checkText(src) {
		return nil, l.probs.err()
	}
	root, ok := l.decode(src)
	if !ok {
		return nil, l.probs.err()
	}
	if root == nil {
		top.errf(0, "file is empty; expected task_name and steps")
		return nil, l.probs.err()
	}
	if !l.checkAliases(root) {
		return nil, l.probs.err()
	}
	l.p = &Pipeline{
		Path:             file,
		Dir:              dir,
		Source:           src,
		RetryDelay:       10 * time.Second,
		Durability:       DurabilityAlways,
		Vars:             map[string]string{},
		MaxDirtyRestarts: 3,
	}
	l.pipeline(root)
	l.validate()
	l.checkBounds()
	if opts.CheckRefs {
		l.checkRefs()
	}
	if err := l.probs.err(); err != nil {
		return nil, err
	}
	return l.p, nil
}

// checkText rejects bytes that YAML cannot hold, naming their line (yaml.v3
// reports them without one).
func (l *loader) checkText(src []byte) bool {
	top := where{l: l}
	if i := bytes.IndexByte(src, 0); i >= 0 {
		top.errf(lineOf(src, i), "contains a NUL byte; a pipeline file must be UTF-8 text")
		return false
	}
	for i := 0; i < len(src); {
		r, size := utf8.DecodeRune(src[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			top.errf(lineOf(src, i), "is not valid UTF-8; save the file as UTF-8")
			return false
		case r == '\t' || r == '\n' || r == '\r' || r == 0x85 || r == 0xFEFF:
		case r < 0x20 || (0x7F <= r && r <= 0x9F) || r == 0xFFFE || r == 0xFFFF:
			top.errf(lineOf(src, i), "contains the control character %U; remove it", r)
			return false
		}
		i += size
	}
	return true
}

func lineOf(src []byte, off int) int { return bytes.Count(src[:off], []byte("\n")) + 1 }

var yamlErrLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^yaml: line (\d+): (.*)$`) })

// decode parses the one document in src and returns its root node, nil for
// an empty file.
func (l *loader) decode(src []byte) (*yaml.Node, bool) {
	top := where{l: l}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err == io.EOF {
		return nil, true
	} else if err != nil {
		l.yamlError(src, err)
		return nil, false
	}
	for {
		var more yaml.Node
		err := dec.Decode(&more)
		if err == io.EOF {
			break
		}
		if err == nil && isEmptyDoc(&more) {
			continue // a trailing "---" holds nothing
		}
		line := more.Line
		if err != nil {
			line = secondDocLine(src)
		}
		top.errf(line, "only one YAML document is allowed; remove the second one (from the \"---\" line)")
		return nil, false
	}
	if isEmptyDoc(&doc) {
		return nil, true
	}
	return doc.Content[0], true
}

func isEmptyDoc(d *yaml.Node) bool {
	if len(d.Content) == 0 {
		return true
	}
	c := d.Content[0]
	return c.Kind == yaml.ScalarNode && c.Tag == "!!null" && c.Value == "" && c.Anchor == ""
}

// secondDocLine guesses the line of the "---" that starts a second document.
func secondDocLine(src []byte) int {
	var markers []int
	first := 0
	for i, line := range strings.Split(string(src), "\n") {
		line = strings.TrimSuffix(line, "\r")
		if line == "---" || strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "---\t") {
			markers = append(markers, i+1)
		}
		t := strings.TrimSpace(line)
		if first == 0 && t != "" && !strings.HasPrefix(t, "#") && !strings.HasPrefix(t, "%") {
			first = i + 1
		}
	}
	switch {
	case len(markers) > 1 && markers[0] == first:
		return markers[1]
	case len(markers) > 0 && markers[0] != first:
		return markers[0]
	}
	return 0
}

// yamlError turns a yaml.v3 syntax error into a problem with its line.
func (l *loader) yamlError(src []byte, err error) {
	top := where{l: l}
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if m := yamlErrLine().FindStringSubmatch(err.Error()); m != nil {
		line, _ = strconv.Atoi(m[1])
		msg = m[2]
	}
	if strings.HasPrefix(msg, "unknown anchor ") {
		name := strings.TrimSuffix(strings.TrimPrefix(msg, "unknown anchor '"), "' referenced")
		if i := bytes.Index(src, []byte("*"+name)); i >= 0 {
			line = lineOf(src, i)
		}
		top.errf(line, "alias *%s names no anchor; define &%s before using it", name, name)
		return
	}
	hint := ""
	if tabbed(src, line) || strings.Contains(msg, "tab character") {
		hint = "; indent with spaces: YAML does not allow tabs"
	}
	top.errf(line, "invalid YAML: %s%s", msg, hint)
}

// tabbed reports whether the 1-based line, or the one before it, has a tab
// in its indentation.
func tabbed(src []byte, line int) bool {
	lines := bytes.Split(src, []byte("\n"))
	for _, n := range []int{line, line - 1} {
		if n >= 1 && n <= len(lines) {
			s := lines[n-1]
			indent := s[:len(s)-len(bytes.TrimLeft(s, " \t"))]
			if bytes.IndexByte(indent, '\t') >= 0 {
				return true
			}
		}
	}
	return false
}

// checkAliases refuses documents whose aliases expand to too many nodes or
// hold themselves. After it, walking the tree through aliases is bounded.
func (l *loader) checkAliases(root *yaml.Node) bool {
	top := where{l: l}
	sizes := map[*yaml.Node]int{}
	active := map[*yaml.Node]bool{}
	plain, aliases := 0, 0
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		plain++
		if n.Kind == yaml.AliasNode {
			aliases++
		}
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(root)
	if aliases == 0 {
		return true // nothing can expand: the common case, and a big file's fast path
	}
	limit := plain + maxAliasNodes
	var bad *yaml.Node
	var count func(n *yaml.Node) int
	count = func(n *yaml.Node) int {
		if n.Kind == yaml.AliasNode {
			if n.Alias == nil {
				return 1
			}
			if active[n.Alias] {
				if bad == nil {
					bad = n
				}
				return limit + 1
			}
			return count(n.Alias)
		}
		if s, ok := sizes[n]; ok {
			return s
		}
		active[n] = true
		total := 1
		for _, c := range n.Content {
			total = min(total+count(c), limit+1)
		}
		delete(active, n)
		sizes[n] = total
		return total
	}
	if count(root) <= limit {
		return true
	}
	if bad != nil {
		top.errf(bad.Line, "alias *%s is inside its own anchor; YAML cannot hold a value that contains itself", bad.Value)
	} else {
		top.errf(0, "aliases add more than %d values to the file; use fewer anchors and aliases", maxAliasNodes)
	}
	return false
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// describe names a value for messages: "ten", the string "10", a list.
func describe(n *yaml.Node) string {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	if n.Tag == "!!null" {
		return "nothing"
	}
	if n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
		return fmt.Sprintf("the string %q", snippet(n.Value))
	}
	if n.Style&(yaml.LiteralStyle|yaml.FoldedStyle) != 0 {
		return "a block of text"
	}
	return strconv.Quote(snippet(n.Value))
}

// numText shows a number as written, quoted unless it is plainly a number.
func numText(v string) string {
	plain := v != "" && len(v) <= 30 && !strings.HasSuffix(v, ".")
	for i := 0; plain && i < len(v); i++ {
		plain = isNameChar(int(v[i])) || strings.IndexByte("+-.", v[i]) >= 0
	}
	if plain {
		return v
	}
	return strconv.Quote(snippet(v))
}

type keyValue struct {
	key  string
	k, v *yaml.Node
}

// pairs returns a mapping's keys and values, applying merge keys (<<) and
// reporting duplicate and non-string keys.
func (w where) pairs(m *yaml.Node) []keyValue {
	var merged []keyValue
	out := make([]keyValue, 0, len(m.Content)/2)
	// A small mapping (a step's) finds a duplicate by scanning what it
	// kept; only a large one pays for a map.
	var seen map[string]int
	if len(m.Content) > 32 {
		seen = make(map[string]int, len(m.Content)/2)
	}
	firstLine := func(key string) (int, bool) {
		if seen != nil {
			line, ok := seen[key]
			return line, ok
		}
		for _, kv := range out {
			if kv.key == key {
				return kv.k.Line, true
			}
		}
		return 0, false
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Tag == "!!merge" {
			merged = append(merged, w.merge(v)...)
			continue
		}
		k = deref(k)
		if k.Kind != yaml.ScalarNode {
			w.errf(k.Line, "a key must be a plain string, not %s", describe(k))
			continue
		}
		if first, dup := firstLine(k.Value); dup {
			w.errf(k.Line, "duplicate key %q (first on line %d); remove one", snippet(k.Value), first)
			continue
		}
		if seen != nil {
			seen[k.Value] = k.Line
		}
		out = append(out, keyValue{k.Value, k, v})
	}
	for _, kv := range merged {
		if _, ok := firstLine(kv.key); !ok {
			if seen != nil {
				seen[kv.key] = kv.k.Line
			}
			out = append(out, kv)
		}
	}
	return out
}

// merge returns the pairs a merge key brings in; earlier mappings win.
func (w where) merge(v *yaml.Node) []keyValue {
	v = deref(v)
	switch v.Kind {
	case yaml.MappingNode:
		return w.pairs(v)
	case yaml.SequenceNode:
		var out []keyValue
		seen := map[string]bool{}
		for _, item := range v.Content {
			item = deref(item)
			if item.Kind != yaml.MappingNode {
				w.errf(item.Line, "a merge key (<<) takes a mapping or a list of mappings, not %s", describe(item))
				continue
			}
			for _, kv := range w.pairs(item) {
				if !seen[kv.key] {
					seen[kv.key] = true
					out = append(out, kv)
				}
			}
		}
		return out
	}
	w.errf(v.Line, "a merge key (<<) takes a mapping or a list of mappings, not %s", describe(v))
	return nil
}

// mapping returns the pairs of a mapping value; null counts as empty.
func (w where) mapping(key string, n *yaml.Node) ([]keyValue, bool) {
	n = deref(n)
	switch {
	case n.Kind == yaml.MappingNode:
		return w.pairs(n), true
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return nil, true
	}
	w.errf(n.Line, "%s must be a mapping of names to values, not %s", key, describe(n))
	return nil, false
}

// list returns the items of a list value; null counts as empty. what names
// the items; when it carries no example of its own (in parentheses), the
// error shows a list of words.
func (w where) list(key, what string, n *yaml.Node) ([]*yaml.Node, bool) {
	n = deref(n)
	switch {
	case n.Kind == yaml.SequenceNode:
		items := make([]*yaml.Node, len(n.Content))
		for i, c := range n.Content {
			items[i] = deref(c)
		}
		return items, true
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return nil, true
	}
	if !strings.Contains(what, "(") {
		what += ", like [a, b]"
	}
	w.errf(n.Line, "%s must be a list of %s, not %s", key, what, describe(n))
	return nil, false
}

var textTags = map[string]bool{"!!str": true, "!!int": true, "!!float": true, "!!bool": true, "!!timestamp": true}

// text decodes a scalar as a string: numbers and booleans keep their text.
func (w where) text(key string, n *yaml.Node) (string, bool) {
	n = deref(n)
	switch {
	case n.Kind != yaml.ScalarNode:
		w.errf(n.Line, "%s must be a string, not %s", key, describe(n))
	case n.Tag == "!!null":
		w.errf(n.Line, "%s has no value; give it one", key)
	case !textTags[n.Tag]:
		w.errf(n.Line, "%s has the unsupported YAML tag %s; remove the tag", key, n.Tag)
	default:
		return n.Value, true
	}
	return "", false
}

// nonEmpty is text that must not be blank.
func (w where) nonEmpty(key string, n *yaml.Node) (string, bool) {
	s, ok := w.text(key, n)
	if ok && strings.TrimSpace(s) == "" {
		w.errf(deref(n).Line, "%s is empty; give it a value", key)
		return "", false
	}
	return s, ok
}

func (w where) integer(key string, n *yaml.Node, lo, hi int) (int, bool) {
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		w.errf(n.Line, "%s has no value; give a whole number or remove the key", key)
		return 0, false
	}
	var v int64
	if n.Kind != yaml.ScalarNode || n.Tag != "!!int" || n.Decode(&v) != nil {
		w.errf(n.Line, "%s must be a whole number, not %s", key, describe(n))
		return 0, false
	}
	if v < int64(lo) {
		w.errf(n.Line, "%s must be at least %d, not %s", key, lo, numText(n.Value))
		return 0, false
	}
	if v > int64(hi) {
		w.errf(n.Line, "%s must be at most %d, not %s", key, hi, numText(n.Value))
		return 0, false
	}
	return int(v), true
}

// seconds decodes a non-negative number of seconds (fractions allowed).
func (w where) seconds(key string, n *yaml.Node) (time.Duration, bool) {
	n = deref(n)
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		w.errf(n.Line, "%s has no value; give a number of seconds or remove the key", key)
		return 0, false
	}
	var f float64
	if n.Kind != yaml.ScalarNode || (n.Tag != "!!int" && n.Tag != "!!float") || n.Decode(&f) != nil {
		w.errf(n.Line, "%s must be a number of seconds, not %s", key, describe(n))
		return 0, false
	}
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		w.errf(n.Line, "%s must be a finite number, not %s", key, numText(n.Value))
	case f < 0:
		w.errf(n.Line, "%s must be at least 0, not %s", key, numText(n.Value))
	case f > maxSeconds:
		w.errf(n.Line, "%s must be at most %d (about 31 years), not %s", key, int(maxSeconds), numText(n.Value))
	default:
		return time.Duration(math.Round(f * float64(time.Second))), true
	}
	return 0, false
}

var yaml11Bools = map[string]bool{"yes": true, "no": true, "on": true, "off": true, "y": true, "n": true}

func (w where) boolean(key string, n *yaml.Node) (bool, bool) {
	n = deref(n)
	var b bool
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" && n.Decode(&b) == nil {
		return b, true
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && yaml11Bools[strings.ToLower(n.Value)] {
		w.errf(n.Line, "%s must be true or false, not %q (YAML 1.1 spellings are not accepted)", key, n.Value)
		return false, false
	}
	w.errf(n.Line, "%s must be true or false, not %s", key, describe(n))
	return false, false
}

// choice decodes one of a fixed set of words.
func (w where) choice(key string, n *yaml.Node, values ...string) (string, bool) {
	s, ok := w.text(key, n)
	if !ok {
		return "", false
	}
	if slices.Contains(values, s) {
		return s, true
	}
	shown := make([]string, len(values))
	for i, v := range values {
		shown[i] = v
		if v == "" {
			shown[i] = `""`
		}
	}
	list := strings.Join(shown[:len(shown)-1], ", ") + " or " + shown[len(shown)-1]
	w.errf(deref(n).Line, "%s must be %s, not %q%s", key, list, snippet(s), DidYouMean(s, values))
	return "", false
}

// unknownKey reports a key that is not one of keys.
func (w where) unknownKey(k *yaml.Node, keys []string, aliases map[string]string) {
	hint := ""
	if a, ok := aliases[k.Value]; ok {
		hint = fmt.Sprintf(" (did you mean %q?)", a)
	} else {
		hint = DidYouMean(k.Value, keys)
	}
	w.errf(k.Line, "unknown key %q%s", snippet(k.Value), hint)
}

func (l *loader) vars(n *yaml.Node) {
	top := where{l: l}
	kvs, _ := top.mapping("vars", n)
	for _, kv := range kvs {
		name := kv.key
		switch {
		case !template.ValidName(name):
			top.errf(kv.k.Line, "var name %q must be letters, digits and _, not starting with a digit", snippet(name))
			continue
		case name != "task_date" && slices.Contains(template.BuiltinVars(), name):
			top.errf(kv.k.Line, "%s is built in and cannot be set under vars; pick another name", name)
			continue
		}
		if s, ok := top.text("vars."+name, kv.v); ok {
			if name == "task_date" && !IsDate(s) {
				// Checked here, not only when the task is prepared, so the
				// message names the line; the date also names files.
				top.errf(kv.v.Line, "vars.task_date %q is not a date: use YYYY-MM-DD", snippet(s))
				continue
			}
			l.p.Vars[name] = s
		}
	}
}

func (l *loader) modules(n *yaml.Node) {
	top := where{l: l}
	items, _ := top.list("modules", "folders", n)
	for _, item := range items {
		s, ok := top.text("modules", item)
		if !ok {
			continue
		}
		if s == "" {
			top.errf(item.Line, "modules lists an empty folder name; remove it")
			continue
		}
		if msg := localPath(s, pipelineFolder); msg != "" {
			top.errf(item.Line, "module folder %q %s", snippet(s), msg)
			continue
		}
		l.p.Modules = append(l.p.Modules, filepath.Clean(s))
		l.moduleLines = append(l.moduleLines, item.Line)
	}
}

// stepInfo is a step with the places that validation refers to.
type stepInfo struct {
	l        *loader
	excludes []excludeAt // matrix exclusions, checked against the matrix
	itemRefs []itemRef   // {{item}} placeholders, checked against foreach/matrix
	s        *Step
	at       where
	line     int // the step's line: its id key, else its mapping
	deps     []*yaml.Node
	// withLines are the lines of the keys of with:, for a run: step's
	// checks.
	withLines map[string]int
	// keyLines holds the line of each key of stepFields present, by its
	// position there; 0 when absent (YAML lines start at 1).
	keyLines [maxStepKeys]int32
}

// newStep returns room for the next step. Steps and their stepInfos come
// from slabs sized for the whole list, so that a 100,000-step file makes a
// few large allocations instead of 200,000 small ones.
func (l *loader) newStep() (*stepInfo, *Step) {
	if len(l.infoSlab) == 0 {
		n := max(l.slabSize, 1)
		l.infoSlab, l.stepSlab = make([]stepInfo, n), make([]Step, n)
	}
	si, s := &l.infoSlab[0], &l.stepSlab[0]
	l.infoSlab, l.stepSlab = l.infoSlab[1:], l.stepSlab[1:]
	return si, s
}

func (si *stepInfo) setLine(key string, line int) {
	if i, ok := stepIndex[key]; ok {
		si.keyLines[i] = int32(line)
	}
}

// lineOf returns the line of key, a member of stepKeys, and whether the
// step has it.
func (si *stepInfo) lineOf(key string) (int, bool) {
	line := int(si.keyLines[stepIndex[key]])
	return line, line > 0
}

// stepLabel is the id that messages name a step by, shortened when it is
// too long to be valid anyway.
func stepLabel(id string) string {
	if len(id) > maxStepIDLen {
		return snippet(id)
	}
	return id
}

// joinPath names a value inside `with` for messages: with.a.b[2]. Long
// paths keep their last 100 bytes.
func joinPath(path, key string) string {
	if !strings.HasPrefix(key, "[") {
		key = "." + snippet(key)
	}
	if p := path + key; len(p) <= 100 {
		return p
	}
	p := path + key
	return "..." + p[len(p)-100:]
}

// value decodes a `with` value into plain Go types.
func (w where) value(path string, n *yaml.Node) (any, bool) {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		m := map[string]any{}
		ok := true
		for _, kv := range w.pairs(n) {
			x, good := w.value(joinPath(path, kv.key), kv.v)
			m[kv.key] = x
			ok = ok && good
		}
		return m, ok
	case yaml.SequenceNode:
		l := make([]any, len(n.Content))
		ok := true
		for i, c := range n.Content {
			x, good := w.value(joinPath(path, fmt.Sprintf("[%d]", i)), c)
			l[i] = x
			ok = ok && good
		}
		return l, ok
	}
	switch n.Tag {
	case "!!null":
		return nil, true
	case "!!str", "!!timestamp":
		w.template(path, n, n.Value, false)
		return n.Value, true
	case "!!bool":
		var b bool
		if n.Decode(&b) == nil {
			return b, true
		}
	case "!!int":
		var i int
		if n.Decode(&i) == nil {
			return i, true
		}
		w.errf(n.Line, "%s: %s does not fit in a 64-bit integer", path, numText(n.Value))
		return nil, false
	case "!!float":
		var f float64
		if n.Decode(&f) == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true
		}
		w.errf(n.Line, "%s must be a finite number, not %s", path, numText(n.Value))
		return nil, false
	}
	w.errf(n.Line, "%s has the unsupported YAML tag %s; remove the tag", path, n.Tag)
	return nil, false
}

// checkStepShape checks the keys of one step against each other.
func (l *loader) checkStepShape(si *stepInfo) {
	s, at := si.s, si.at
	if s.ID == "" {
		if _, has := si.lineOf("id"); !has {
			at.errf(si.line, "has no id; add id: <name>")
		}
	}
	body := checkBodies(si)
	checkImage(si, body)
	if body == "run" {
		l.checkRunShape(si)
	}
	if body == "command" {
		checkCommandKeys(si)
	}
	isLua := s.Lua != "" || s.Script != "" || s.Uses != ""
	if _, ok := si.lineOf("isolation"); !ok && isLua {
		s.Isolation = l.p.Isolation
	}
	if isLua {
		if line, ok := si.lineOf("working_dir"); ok {
			at.errf(line, "working_dir applies to shell steps only (command); a Lua step's paths are relative to the workspace")
		}
		s.WorkingDir = "" // a default working_dir is for shell steps
	} else {
		s.Allow, s.HTTPHosts = nil, nil // a default allow is for Lua steps
	}
	if s.Run != "" {
		s.WorkingDir, s.Env = "", nil // the sub-pipeline's steps have their own
	}
	if s.Command == "" && s.CleanupCommand == "" {
		if line, ok := si.lineOf("shell"); ok {
			at.errf(line, "shell applies to shell bodies (command, cleanup_command); remove it from this step")
		}
		s.Shell = nil // a default shell is for shell bodies
	}
	l.checkForeach(si)
	// retry_policy defaults to none, which never retries: a step that asks
	// for retries without a policy would silently get none.
	if line, ok := si.lineOf("max_retries"); ok && s.MaxRetries > 0 {
		if _, has := si.lineOf("retry_policy"); !has && l.p.Defaults.RetryPolicy == "" {
			at.errf(line, "max_retries: %d has no effect without a retry_policy (the default is none); add retry_policy: fixed or exponential", s.MaxRetries)
		}
	}
}

// checkBodies checks that a step has exactly one body and at most one
// cleanup hook, and returns the body's key ("" unless exactly one).
func checkBodies(si *stepInfo) string {
	present := func(keys, out []string) []string {
		for _, k := range keys {
			if _, ok := si.lineOf(k); ok {
				out = append(out, k)
			}
		}
		return out
	}
	var bodyBuf, cleanupBuf [4]string
	bodies := present(bodyKeys, bodyBuf[:0])
	if cleanups := present(cleanupKeys, cleanupBuf[:0]); len(cleanups) > 1 {
		line, _ := si.lineOf(cleanups[1])
		defer si.at.errf(line, "has %s; keep at most one cleanup hook", andList(cleanups))
	}
	switch len(bodies) {
	case 0:
		si.at.errf(si.line, "has no body; add one of command, lua, script, uses or run")
	case 1:
		return bodies[0]
	default:
		line, _ := si.lineOf(bodies[1])
		si.at.errf(line, "has %s; keep exactly one body", andList(bodies))
	}
	return ""
}

// checkCommandKeys reports the keys a command step does not read.
func checkCommandKeys(si *stepInfo) {
	if line, ok := si.lineOf("with"); ok {
		si.at.errf(line, "with is read by Lua steps (as ctx.params), not by a command; pass values through env or the command itself")
	}
	for _, k := range []string{"memory_mb", "isolation", "allow"} {
		if line, ok := si.lineOf(k); ok {
			si.at.errf(line, "%s applies to Lua steps only (lua, script or uses); remove it from this command step", k)
		}
	}
}

func andList(words []string) string {
	if len(words) == 2 {
		return "both " + words[0] + " and " + words[1]
	}
	return strings.Join(words[:len(words)-1], ", ") + " and " + words[len(words)-1]
}
