package template

import (
	"fmt"
	"strings"
)

// BuiltinVars lists the built-in template variables: task_date, task_id,
// task_name, step_id, artifacts_dir, state_dir.
func BuiltinVars() []string {
	return []string{"task_date", "task_id", "task_name", "step_id", "artifacts_dir", "state_dir"}
}

// RenderShell renders a shell command template (command, cleanup_command):
// each {{name}} is replaced by vars[name], escaped for the shell context the
// placeholder sits in, so that the value always arrives verbatim:
//
//   - unquoted (also at the top level of $(...)): the value becomes exactly
//     one word, left bare when it only holds [A-Za-z0-9_./:=@%+,-] and is
//     non-empty, otherwise single-quoted with ' written as '"'"'. A value in
//     an unquoted word that holds a "{" is always quoted, so that bash brace
//     expansion cannot split it;
//   - inside '...': every ' in the value is written as '"'"';
//   - inside "...": \, ", $ and ` in the value get a backslash.
//
// It returns an error for an unknown variable, a malformed placeholder, a NUL
// byte in the template or in a value, and a placeholder in a context where no
// escaping is safe: a heredoc (body or delimiter), backticks, a comment,
// ${...}, $((...)), $'...', right after a backslash, or right after a "$" or
// "$name". Values are never re-expanded.
func RenderShell(tmpl string, vars map[string]string) (string, error) {
	segs, err := Parse(tmpl)
	if err != nil {
		return "", err
	}
	if i := strings.IndexByte(tmpl, 0); i >= 0 {
		return "", &Error{Offset: i, Msg: "the command contains a NUL byte"}
	}
	if err := checkVars(segs, vars); err != nil {
		return "", err
	}
	places, err := shellContexts(segs)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for i, s := range segs {
		if s.Name == "" {
			b.WriteString(s.Lit)
			continue
		}
		v := vars[s.Name]
		if j := strings.IndexByte(v, 0); j >= 0 {
			return "", &Error{Offset: s.Offset, Msg: fmt.Sprintf("the value of {{%s}} contains a NUL byte", s.Name)}
		}
		switch p := places[i]; p.ctx {
		case ctxUnquoted:
			b.WriteString(shellWord(v, p.force))
		case ctxSingle:
			b.WriteString(strings.ReplaceAll(v, "'", `'"'"'`))
		case ctxDouble:
			b.WriteString(doubleQuoteEscaper.Replace(v))
		}
	}
	return b.String(), nil
}

// RenderPlain renders a template used outside a shell (env values, `with`
// string values): plain substitution, no quoting. An unknown variable or a
// malformed placeholder is an error. Values are never re-expanded.
func RenderPlain(tmpl string, vars map[string]string) (string, error) {
	segs, err := Parse(tmpl)
	if err != nil {
		return "", err
	}
	if err := checkVars(segs, vars); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, s := range segs {
		if s.Name == "" {
			b.WriteString(s.Lit)
		} else {
			b.WriteString(vars[s.Name])
		}
	}
	return b.String(), nil
}

var doubleQuoteEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`")

// shellWord quotes v as exactly one shell word, the way CPython's
// shlex.quote does; force quotes even a value that could stay bare.
func shellWord(v string, force bool) string {
	if !force && isBareWord(v) {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'"'"'`) + "'"
}

func isBareWord(v string) bool {
	if v == "" {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !isNameChar(int(c)) && !strings.ContainsRune("./:=@%+,-", rune(c)) {
			return false
		}
	}
	return true
}

// Error is a problem in a template. Offset is the byte offset where it was
// found, so that validation can name the line of a block scalar.
type Error struct {
	Offset int
	Msg    string
}

func (e *Error) Error() string { return e.Msg }

// Segment is a run of literal text, or a placeholder when Name is set.
type Segment struct {
	Lit    string
	Name   string
	Offset int // byte offset in the template
}

// Parse splits tmpl into literal text and {{name}} placeholders.
// Spaces and tabs are allowed around the name: {{ name }}. There is no
// escape for a literal "{{": a value holding braces can be put in a var,
// since values are never re-expanded.
func Parse(tmpl string) ([]Segment, error) {
	var segs []Segment
	lit := 0
	for i := 0; ; {
		j := strings.Index(tmpl[i:], "{{")
		if j < 0 {
			break
		}
		start := i + j
		rest := tmpl[start+2:]
		end := strings.Index(rest, "}}")
		next := strings.Index(rest, "{{")
		nl := strings.IndexByte(rest, '\n')
		if end < 0 || (next >= 0 && next < end) || (nl >= 0 && nl < end) {
			return nil, &Error{Offset: start, Msg: fmt.Sprintf("unterminated placeholder %q; close it with }}", snippet(tmpl[start:]))}
		}
		raw := tmpl[start : start+2+end+2]
		name := strings.Trim(rest[:end], " \t")
		switch {
		case name == "":
			return nil, &Error{Offset: start, Msg: fmt.Sprintf("empty placeholder %q; write {{name}}", raw)}
		case strings.HasPrefix(name, itemPrefix):
			if _, ok := ItemRef(name); !ok {
				return nil, &Error{Offset: start, Msg: fmt.Sprintf("invalid placeholder %q: a matrix value is {{item.NAME}}", snippet(raw))}
			}
		case strings.HasPrefix(name, outputsPrefix):
			if _, _, ok := OutputRef(name); !ok {
				return nil, &Error{Offset: start, Msg: fmt.Sprintf("invalid placeholder %q: an upstream output is {{outputs.STEP}} or {{outputs.STEP.KEY}}", snippet(raw))}
			}
		case strings.HasPrefix(name, triggerPrefix):
			if !TriggerRef(name) {
				return nil, &Error{Offset: start, Msg: fmt.Sprintf("invalid placeholder %q: what started the run is {{trigger.NAME}} or {{trigger.outputs.STEP.KEY}}", snippet(raw))}
			}
		case !ValidName(name):
			return nil, &Error{Offset: start, Msg: fmt.Sprintf("invalid placeholder %q: a name is letters, digits and _, not starting with a digit; for literal braces, put them in a var", snippet(raw))}
		}
		if lit < start {
			segs = append(segs, Segment{Lit: tmpl[lit:start], Offset: lit})
		}
		segs = append(segs, Segment{Name: name, Offset: start})
		i = start + len(raw)
		lit = i
	}
	if lit < len(tmpl) {
		segs = append(segs, Segment{Lit: tmpl[lit:], Offset: lit})
	}
	return segs, nil
}

// snippet shortens s to its first line and at most 30 bytes, for messages.
func snippet(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 30 {
		s = s[:30] + "..."
	}
	return s
}

// outputsPrefix starts the placeholders of upstream steps' outputs.
const outputsPrefix = "outputs."

// itemPrefix starts the placeholders of a matrix step's values.
const itemPrefix = "item."

// ItemRef parses the name of a matrix value's placeholder, item.NAME.
func ItemRef(name string) (axis string, ok bool) {
	axis, ok = strings.CutPrefix(name, itemPrefix)
	return axis, ok && refPart(axis)
}

// OutputRef parses the name of an upstream output's placeholder,
// outputs.STEP or outputs.STEP.KEY (STEP a step id, KEY letters, digits, _
// and -): the whole output of step, or the value of its key.
func OutputRef(name string) (step, key string, ok bool) {
	rest, ok := strings.CutPrefix(name, outputsPrefix)
	if !ok {
		return "", "", false
	}
	step, key, hasKey := strings.Cut(rest, ".")
	if !refPart(step) || (hasKey && !refPart(key)) {
		return "", "", false
	}
	return step, key, true
}

// triggerPrefix starts the placeholders of what started a run (a
// pipeline's triggers:).
const triggerPrefix = "trigger."

// TriggerRef reports whether name is the name of a trigger's placeholder:
// trigger.NAME (NAME a variable's name), or trigger.outputs.STEP or
// trigger.outputs.STEP.KEY, an output of the run whose end started this one.
func TriggerRef(name string) bool {
	rest, ok := strings.CutPrefix(name, triggerPrefix)
	if !ok {
		return false
	}
	if _, _, ok := OutputRef(rest); ok {
		return true
	}
	return ValidName(rest) && rest != "outputs"
}

// refPart reports whether s is a non-empty run of letters, digits, _ and -.
func refPart(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := int(s[i]); !isNameChar(c) && c != '-' {
			return false
		}
	}
	return true
}

// ValidName reports whether s is a variable's name: letters, digits and _,
// not starting with a digit.
func ValidName(s string) bool {
	if s == "" || !isNameStart(int(s[0])) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isNameChar(int(s[i])) {
			return false
		}
	}
	return true
}

func isNameStart(c int) bool {
	return c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isNameChar(c int) bool { return isNameStart(c) || ('0' <= c && c <= '9') }

// checkVars reports the first placeholder whose name is not in vars.
func checkVars(segs []Segment, vars map[string]string) error {
	for _, s := range segs {
		if s.Name == "" {
			continue
		}
		if _, ok := vars[s.Name]; !ok {
			return &Error{Offset: s.Offset, Msg: fmt.Sprintf("unknown template variable {{%s}}", s.Name)}
		}
	}
	return nil
}

// Placeholder contexts in a shell command.
const (
	ctxUnquoted = iota
	ctxSingle
	ctxDouble
)

type placement struct {
	ctx   int
	force bool // quote even a bare-safe value
}

type frameKind int

const (
	frTop      frameKind = iota
	frSubst              // $( ... )
	frSingle             // ' ... '
	frDouble             // " ... "
	frBacktick           // ` ... `
	frParam              // ${ ... }
	frArith              // $(( ... ))
	frAnsi               // $' ... '
)

// frame is one level of shell nesting. The word fields are used by the
// unquoted frames (top and $(...)) to find comments, brace expansion and
// case ... esac, whose ")" does not close a $(...).
type frame struct {
	kind      frameKind
	off       int // template offset where the frame opened
	depth     int // open ( in top, $( and $((; open { in ${
	caseDepth int

	word     []byte // the current word's text, when plain
	wordLen  int    // tokens in the current word
	plain    bool   // the current word has no quotes, expansions or placeholders
	brace    bool   // the current word holds an unquoted {
	cmdPos   bool   // the next word is in command position
	prevWord string
}

type heredoc struct {
	delim string
	strip bool // <<- strips leading tabs
}

// shellLexer finds the shell context of each placeholder. It walks the
// template's text with each placeholder as one opaque token, so values never
// influence the parse: only the author's text does.
type shellLexer struct {
	segs   []Segment
	toks   []int // a byte, or -(index of the placeholder's Segment)-1
	offs   []int // template offset of each token
	i      int
	stack  []*frame
	docs   []heredoc
	places []placement
	// ambiguous is a construct after which apollo cannot be sure of the
	// context; a placeholder after it is an error.
	ambiguous string
	err       *Error
}

// CheckShell reports an error for a placeholder of a shell command template
// that no escaping can make safe (see RenderShell), nil otherwise.
func CheckShell(segs []Segment) error {
	_, err := shellContexts(segs)
	return err
}

// shellContexts returns the context of each placeholder in segs (indexed
// like segs), or an error for a placeholder no escaping can make safe.
func shellContexts(segs []Segment) ([]placement, error) {
	l := &shellLexer{segs: segs, places: make([]placement, len(segs))}
	has := false
	for i, s := range segs {
		if s.Name != "" {
			l.toks = append(l.toks, -i-1)
			l.offs = append(l.offs, s.Offset)
			has = true
			continue
		}
		for j := 0; j < len(s.Lit); j++ {
			l.toks = append(l.toks, int(s.Lit[j]))
			l.offs = append(l.offs, s.Offset+j)
		}
	}
	if !has {
		return l.places, nil
	}
	l.run()
	if l.err != nil {
		return nil, l.err
	}
	return l.places, nil
}

func (l *shellLexer) run() {
	l.push(frTop)
	for l.err == nil && l.i < len(l.toks) {
		f := l.stack[len(l.stack)-1]
		switch f.kind {
		case frTop, frSubst:
			l.unquoted(f)
		case frSingle:
			l.single()
		case frDouble:
			l.double()
		case frBacktick:
			l.backtick()
		case frParam:
			l.param(f)
		case frArith:
			l.arith(f)
		case frAnsi:
			l.ansi()
		}
	}
	if l.err != nil || len(l.stack) == 1 {
		return
	}
	f := l.stack[len(l.stack)-1]
	what := map[frameKind]string{
		frSubst:    "$(",
		frSingle:   "single quote",
		frDouble:   "double quote",
		frBacktick: "backtick",
		frParam:    "${",
		frArith:    "$((",
		frAnsi:     "$'",
	}[f.kind]
	l.fail(f.off, fmt.Sprintf("unterminated %s at %q; close it so that apollo can tell how to quote placeholders", what, snippet(l.text(f.off))))
}

// text is the template from off on, with placeholders written {{name}}.
func (l *shellLexer) text(off int) string {
	var b strings.Builder
	for _, s := range l.segs {
		switch {
		case s.Name != "" && s.Offset >= off:
			b.WriteString("{{" + s.Name + "}}")
		case s.Name == "" && off < s.Offset+len(s.Lit):
			b.WriteString(s.Lit[max(0, off-s.Offset):])
		}
	}
	return b.String()
}

func (l *shellLexer) fail(off int, msg string) {
	if l.err == nil {
		l.err = &Error{Offset: off, Msg: msg}
	}
}

// failAt fails at the placeholder token k with "{{name}} " + msg.
func (l *shellLexer) failAt(k int, msg string) {
	l.fail(l.offs[k], fmt.Sprintf("{{%s}} %s", l.segs[-l.toks[k]-1].Name, msg))
}

func (l *shellLexer) push(kind frameKind) {
	off := 0
	if l.i < len(l.offs) {
		off = l.offs[l.i]
	}
	l.stack = append(l.stack, &frame{kind: kind, off: off, plain: true, cmdPos: true})
}

func (l *shellLexer) pop() { l.stack = l.stack[:len(l.stack)-1] }

// peek returns the token k places ahead, or -1<<30 past the end.
func (l *shellLexer) peek(k int) int {
	if l.i+k < len(l.toks) {
		return l.toks[l.i+k]
	}
	return -1 << 30
}

func isPlaceholder(t int) bool { return t < 0 && t != -1<<30 }

func (l *shellLexer) inDouble() bool {
	for _, f := range l.stack {
		if f.kind == frDouble {
			return true
		}
	}
	return false
}

// placeholder records the context of the placeholder at l.i, unless a frame
// on the stack makes every context unsafe.
func (l *shellLexer) placeholder(ctx int, force bool) {
	for j := len(l.stack) - 1; j >= 0; j-- {
		switch l.stack[j].kind {
		case frBacktick:
			l.failAt(l.i, "is inside backticks; use $(...) instead")
			return
		case frParam:
			l.failAt(l.i, "is inside ${...}; move it out of the parameter expansion")
			return
		case frArith:
			l.failAt(l.i, "is inside $((...)); pass the value through env instead")
			return
		case frAnsi:
			l.failAt(l.i, "is inside $'...'; use '...' instead")
			return
		}
	}
	if l.ambiguous != "" {
		l.failAt(l.i, "comes after "+l.ambiguous)
		return
	}
	l.places[-l.toks[l.i]-1] = placement{ctx: ctx, force: force}
	l.i++
}

func (l *shellLexer) setAmbiguous(msg string) {
	if l.ambiguous == "" {
		l.ambiguous = msg
	}
}

// skipEscape steps over a backslash and the byte it escapes; a placeholder
// after it is left for the frame to reject.
func (l *shellLexer) skipEscape() {
	if isPlaceholder(l.peek(1)) {
		l.i++
		return
	}
	l.i = min(l.i+2, len(l.toks))
}

// backslash handles a backslash in an unquoted or double-quoted frame, where
// it would escape the first byte of the value.
func (l *shellLexer) backslash() {
	if isPlaceholder(l.peek(1)) {
		l.failAt(l.i+1, `follows a backslash; remove the backslash: apollo quotes values itself`)
		return
	}
	l.i = min(l.i+2, len(l.toks))
}

// dollar handles a "$" in an unquoted, double-quoted or ${...} frame.
func (l *shellLexer) dollar(unquoted bool) {
	n1 := l.peek(1)
	switch {
	case isPlaceholder(n1):
		l.failAt(l.i+1, `follows "$"; remove the "$": the value is inserted as text, not as a variable name`)
	case n1 == '(' && l.peek(2) == '(':
		l.push(frArith)
		l.stack[len(l.stack)-1].depth = 2
		l.i += 3
	case n1 == '(':
		l.push(frSubst)
		l.i += 2
	case n1 == '{':
		l.push(frParam)
		l.i += 2
	case n1 == '\'' && unquoted:
		l.push(frAnsi)
		l.i += 2
	case n1 == '"' && unquoted:
		l.push(frDouble)
		l.i += 2
	case isNameStart(n1):
		j := l.i + 1
		for j < len(l.toks) && isNameChar(l.toks[j]) {
			j++
		}
		if j < len(l.toks) && isPlaceholder(l.toks[j]) {
			name := make([]byte, 0, j-l.i-1)
			for _, t := range l.toks[l.i+1 : j] {
				name = append(name, byte(t))
			}
			l.failAt(j, fmt.Sprintf("directly follows $%s; write ${%s} so that the value cannot extend the variable name", name, name))
			return
		}
		l.i = j
	case n1 >= 0 && strings.ContainsRune("0123456789?$#@*!-", rune(n1)):
		l.i += 2
	default:
		l.i++
	}
}

func (f *frame) add(c byte) {
	f.word = append(f.word, c)
	f.wordLen++
}

func (f *frame) opaque() {
	f.wordLen++
	f.plain = false
}

// endWord closes the current word of an unquoted frame and tracks
// case ... esac, so that a pattern's ")" is not taken to close a $(...).
func (f *frame) endWord() {
	if f.wordLen == 0 {
		return
	}
	w := ""
	if f.plain {
		w = string(f.word)
	}
	switch {
	case w == "":
		f.cmdPos = false
	case f.cmdPos && w == "case":
		f.caseDepth++
		f.cmdPos = false
	case w == "esac" && f.caseDepth > 0 && (f.cmdPos || f.prevWord == "in"):
		f.caseDepth--
		f.cmdPos = false
	case f.cmdPos && strings.Contains(" ! { if then else elif while until do time ", " "+w+" "):
	default:
		f.cmdPos = false
	}
	f.prevWord = w
	f.word = f.word[:0]
	f.wordLen = 0
	f.plain = true
	f.brace = false
}

// unquoted reads one byte (or placeholder) in the unquoted context. It is
// one switch over the characters that change the shell's state there: like
// a port of a state table, it reads best beside the shell grammar it
// follows, so every byte that moves to another context keeps its case here;
// only the longer readings of ")" and "<" are named parts of their own.
func (l *shellLexer) unquoted(f *frame) {
	t := l.toks[l.i]
	if t < 0 {
		f.opaque()
		l.placeholder(ctxUnquoted, f.brace)
		return
	}
	c := byte(t)
	switch c {
	case ' ', '\t':
		f.endWord()
		l.i++
	case '\n':
		f.endWord()
		f.cmdPos = true
		l.i++
		if len(l.docs) > 0 {
			l.heredocBodies()
		}
	case '#':
		if f.wordLen == 0 {
			l.comment()
			return
		}
		f.add(c)
		l.i++
	case '\'':
		f.opaque()
		l.push(frSingle)
		l.i++
	case '"':
		f.opaque()
		l.push(frDouble)
		l.i++
	case '`':
		f.opaque()
		l.push(frBacktick)
		l.i++
	case '\\':
		if l.peek(1) == '\n' { // a line continuation vanishes before parsing
			l.i += 2
			return
		}
		f.opaque()
		l.backslash()
	case '$':
		f.opaque()
		l.dollar(true)
	case ';', '&', '|':
		f.endWord()
		f.cmdPos = true
		l.i++
	case '>':
		f.endWord()
		l.i++
	case '(':
		f.endWord()
		f.depth++
		f.cmdPos = true
		l.i++
	case ')':
		f.endWord()
		l.closeParen(f)
	case '<':
		f.endWord()
		l.lessThan()
	case '{':
		f.add(c)
		f.brace = true
		l.i++
	default:
		f.add(c)
		l.i++
	}
}

// closeParen reads a ")" in the unquoted context: it closes a "(" opened
// in this frame, ends a case pattern, or else ends the $(...) the frame
// is.
func (l *shellLexer) closeParen(f *frame) {
	l.i++
	switch {
	case f.depth > 0:
		f.depth--
	case f.kind == frSubst && f.caseDepth > 0:
		// the end of a case pattern
	case f.kind == frSubst:
		l.pop()
		return
	}
	f.cmdPos = true
}

// lessThan reads a "<" in the unquoted context: a redirection, a bash
// here-string (a plain word follows), or a heredoc, whose delimiter it
// reads so that the body is lexed once the line ends.
func (l *shellLexer) lessThan() {
	switch {
	case l.peek(1) == '<' && l.peek(2) == '<':
		l.i += 3
	case l.peek(1) == '<':
		l.i += 2
		strip := l.peek(0) == '-'
		if strip {
			l.i++
		}
		l.heredocDelim(strip)
	default:
		l.i++
	}
}

func (l *shellLexer) comment() {
	for l.i < len(l.toks) && l.toks[l.i] != '\n' {
		if isPlaceholder(l.toks[l.i]) {
			l.failAt(l.i, "is inside a shell comment; take it out of the comment")
			return
		}
		l.i++
	}
}

func (l *shellLexer) heredocDelim(strip bool) {
	for l.peek(0) == ' ' || l.peek(0) == '\t' {
		l.i++
	}
	var d []byte
	quoted := false
	bad := func() bool {
		if isPlaceholder(l.peek(0)) {
			l.failAt(l.i, "is in a heredoc delimiter; write the delimiter literally")
			return true
		}
		return false
	}
loop:
	for l.i < len(l.toks) {
		if bad() {
			return
		}
		c := byte(l.toks[l.i])
		switch c {
		case ' ', '\t', '\n', ';', '&', '|', '<', '>', '(', ')':
			break loop
		case '\'', '"':
			quoted = true
			l.i++
			for l.i < len(l.toks) && l.toks[l.i] != int(c) {
				if bad() {
					return
				}
				if c == '"' && l.toks[l.i] == '\\' && l.i+1 < len(l.toks) {
					l.i++
					if bad() {
						return
					}
				}
				d = append(d, byte(l.toks[l.i]))
				l.i++
			}
			if l.i >= len(l.toks) {
				l.setAmbiguous("an unterminated heredoc delimiter")
				return
			}
			l.i++
		case '\\':
			quoted = true
			l.i++
			if l.i < len(l.toks) {
				if bad() {
					return
				}
				d = append(d, byte(l.toks[l.i]))
				l.i++
			}
		default:
			d = append(d, c)
			l.i++
		}
	}
	if len(d) == 0 && !quoted {
		l.setAmbiguous("a heredoc operator << without a delimiter")
		return
	}
	l.docs = append(l.docs, heredoc{delim: string(d), strip: strip})
}

// heredocBodies consumes the bodies of the pending heredocs, which start
// after the newline that ends the line of their operators.
func (l *shellLexer) heredocBodies() {
	for _, d := range l.docs {
		for l.i < len(l.toks) {
			var line []byte
			ph := -1
			for l.i < len(l.toks) && l.toks[l.i] != '\n' {
				if t := l.toks[l.i]; t < 0 {
					if ph < 0 {
						ph = l.i
					}
				} else {
					line = append(line, byte(t))
				}
				l.i++
			}
			if l.i < len(l.toks) {
				l.i++
			}
			if ph >= 0 {
				l.failAt(ph, "is inside a heredoc; pass the value through env instead")
				return
			}
			text := string(line)
			if d.strip {
				text = strings.TrimLeft(text, "\t")
			}
			if text == d.delim {
				break
			}
		}
	}
	l.docs = l.docs[:0]
}

func (l *shellLexer) single() {
	switch t := l.toks[l.i]; {
	case t < 0:
		l.placeholder(ctxSingle, false)
	case t == '\'':
		l.pop()
		l.i++
	default:
		l.i++
	}
}

func (l *shellLexer) double() {
	switch t := l.toks[l.i]; {
	case t < 0:
		l.placeholder(ctxDouble, false)
	case t == '"':
		l.pop()
		l.i++
	case t == '\\':
		l.backslash()
	case t == '`':
		l.push(frBacktick)
		l.i++
	case t == '$':
		l.dollar(false)
	default:
		l.i++
	}
}

func (l *shellLexer) backtick() {
	switch t := l.toks[l.i]; {
	case t < 0:
		l.placeholder(ctxUnquoted, false)
	case t == '\\':
		l.skipEscape()
	case t == '`':
		l.pop()
		l.i++
	default:
		l.i++
	}
}

func (l *shellLexer) ansi() {
	switch t := l.toks[l.i]; {
	case t < 0:
		l.placeholder(ctxUnquoted, false)
	case t == '\\':
		l.setAmbiguous(`a backslash inside $'...', which dash and bash read differently; use '...' instead`)
		l.skipEscape()
	case t == '\'':
		l.pop()
		l.i++
	default:
		l.i++
	}
}

func (l *shellLexer) param(f *frame) {
	switch t := l.toks[l.i]; {
	case t < 0:
		l.placeholder(ctxUnquoted, false)
	case t == '\\':
		l.skipEscape()
	case t == '\'':
		if l.inDouble() {
			l.setAmbiguous(`a single quote inside "${...}", which dash and bash read differently`)
			l.i++
			return
		}
		l.push(frSingle)
		l.i++
	case t == '"':
		l.push(frDouble)
		l.i++
	case t == '`':
		l.push(frBacktick)
		l.i++
	case t == '$':
		l.dollar(!l.inDouble())
	case t == '{':
		f.depth++
		l.i++
	case t == '}':
		l.i++
		if f.depth == 0 {
			l.pop()
			return
		}
		f.depth--
	default:
		l.i++
	}
}

func (l *shellLexer) arith(f *frame) {
	switch t := l.toks[l.i]; {
	case t < 0:
		l.placeholder(ctxUnquoted, false)
	case t == '\\':
		l.skipEscape()
	case t == '$':
		l.dollar(false)
	case t == '(':
		f.depth++
		l.i++
	case t == ')':
		l.i++
		if f.depth--; f.depth == 0 {
			l.pop()
		}
	default:
		l.i++
	}
}
