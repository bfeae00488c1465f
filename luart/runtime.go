package luart

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// MaxSourceBytes is the largest Lua file or chunk a Runtime compiles.
const MaxSourceBytes = 16 << 20

// maxProtos bounds the compiled-chunk cache; when full it starts over.
const maxProtos = 4096

// ValidModuleName reports whether name is a module name require accepts: letters, digits and
// underscores in dot-separated parts ("apollo.idem", "deploy.helpers"), at most 256 bytes; so
// no paths and no "..". Every new state checks its Go modules' names, so this is a loop rather
// than a regular expression.
func ValidModuleName(name string) bool {
	if name == "" || len(name) > 256 {
		return false
	}
	part := 0 // length of the current dot-separated part
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c == '.':
			if part == 0 {
				return false
			}
			part = 0
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
			part++
		default:
			return false
		}
	}
	return part > 0
}

// Options configure a Runtime.
type Options struct {
	// ModuleDirs are folders searched by require("a.b") for a/b.lua, then a/b/init.lua, in
	// order. Files are opened through os.Root, so nothing outside a folder is reached (no "..",
	// no absolute path, no symbolic link out). Relative folders are taken from the current
	// directory.
	ModuleDirs []string
	// Bundled is a second source of modules (the embedded scripts/ folder), searched after
	// ModuleDirs the same way; may be nil.
	Bundled fs.FS
	// BundledName is put in front of the paths of Bundled modules in chunk names, so errors
	// read "scripts/notify.lua:3: ...". Default "scripts".
	BundledName string
	// Root is the project folder that chunk names are made relative to (so errors read
	// "scripts/load.lua:12: message") and that DoFile paths are resolved in. Default: the
	// current directory.
	Root string
	// ToStringBudget bounds how long an error table's __tostring may run when an error is
	// described (it could loop). Default one second.
	ToStringBudget time.Duration
}

// Runtime compiles and caches chunks and makes fresh sandboxed states. Compiled chunks
// (protos) are cached by content hash and chunk name and shared between states; states never
// are. A Runtime is safe for concurrent use.
type Runtime struct {
	root        string // absolute
	dirs        []moduleDir
	bundled     fs.FS
	bundledName string
	// toStringBudget is Options.ToStringBudget, defaulted.
	toStringBudget time.Duration

	mu     sync.Mutex
	protos map[protoKey]*lua.FunctionProto
	// bySource holds one compiled proto per source text, whatever its chunk name: a source
	// seen under a new name (steps with the same body) is renamed, not compiled again.
	bySource map[[sha256.Size]byte]*lua.FunctionProto
}

// protoKey names a compiled chunk: its name, the hash of its source and how many lines its
// line numbers are shifted (CompileAt).
type protoKey struct {
	name string
	sum  [sha256.Size]byte
	off  int
}

type moduleDir struct {
	dir   string // absolute
	chunk string // how chunk names start: relative to the root when inside it
}

// New returns a Runtime.
func New(opts Options) *Runtime {
	rt := &Runtime{
		root:           absPath(opts.Root),
		bundled:        opts.Bundled,
		bundledName:    opts.BundledName,
		toStringBudget: opts.ToStringBudget,
		protos:         make(map[protoKey]*lua.FunctionProto),
		bySource:       make(map[[sha256.Size]byte]*lua.FunctionProto),
	}
	if rt.bundledName == "" {
		rt.bundledName = "scripts"
	}
	if rt.toStringBudget <= 0 {
		rt.toStringBudget = time.Second
	}
	for _, d := range opts.ModuleDirs {
		abs := absPath(d)
		rt.dirs = append(rt.dirs, moduleDir{dir: abs, chunk: rt.chunkPath(abs)})
	}
	return rt
}

func absPath(p string) string {
	if p == "" {
		p = "."
	}
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}

// chunkPath names an absolute path for chunk names: relative to the root when inside it.
func (rt *Runtime) chunkPath(abs string) string {
	if rel, ok := rt.relInRoot(abs); ok {
		return rel
	}
	return filepath.ToSlash(abs)
}

// relInRoot returns abs relative to the root, slash-separated, if it is inside it.
func (rt *Runtime) relInRoot(abs string) (string, bool) {
	rel, err := filepath.Rel(rt.root, abs)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", false
	}
	if rel == "." {
		return "", true
	}
	return filepath.ToSlash(rel), true
}

// Compile compiles source named chunkName, or returns the cached proto of an earlier call with
// the same name and source. A syntax error is a *ScriptError.
func (rt *Runtime) Compile(chunkName, source string) (*lua.FunctionProto, error) {
	return rt.CompileAt(chunkName, source, 1)
}

// CompileAt compiles source as Compile does, numbering its first line line: a chunk that is
// part of a bigger file (an inline body in a pipeline file) reports the file's lines in its
// syntax errors, runtime errors and tracebacks ("pipeline.yaml:12: ..."). The renumbered proto
// is cached too; the compiled code is shared with the proto numbered from line 1.
func (rt *Runtime) CompileAt(chunkName, source string, line int) (*lua.FunctionProto, error) {
	if msg := refused(source); msg != "" {
		return nil, &ScriptError{Msg: chunkName + ": " + msg}
	}
	off := max(line, 1) - 1
	key := protoKey{name: chunkName, sum: sha256.Sum256([]byte(source)), off: off}
	rt.mu.Lock()
	proto := rt.protos[key]
	if proto == nil {
		if base := rt.bySource[key.sum]; base != nil {
			proto = base
			if off > 0 || base.SourceName != chunkName {
				proto = relabel(base, chunkName, off)
			}
			rt.storeLocked(key, proto)
		}
	}
	rt.mu.Unlock()
	if proto != nil {
		return proto, nil
	}
	base, err := compile(chunkName, source)
	if err != nil {
		return nil, syntaxError(chunkName, source, off, err)
	}
	proto = base
	if off > 0 {
		proto = relabel(base, chunkName, off)
	}
	rt.mu.Lock()
	rt.storeLocked(key, proto)
	if rt.bySource[key.sum] == nil {
		rt.bySource[key.sum] = base
	}
	rt.mu.Unlock()
	return proto, nil
}

// storeLocked caches proto under key; rt.mu must be held. A full cache starts over.
func (rt *Runtime) storeLocked(key protoKey, proto *lua.FunctionProto) {
	if len(rt.protos) >= maxProtos {
		clear(rt.protos)
		clear(rt.bySource)
	}
	rt.protos[key] = proto
}

// relabel returns a copy of p, and of the functions it defines, named chunkName and with line
// numbers off lines further down: the chunk name and the line numbers are the only parts of a
// compiled chunk that depend on where it comes from (they appear in error positions and
// tracebacks). The code and constants are shared, as gopher-lua never changes them once
// compiled, and so are the line numbers when off is 0.
func relabel(p *lua.FunctionProto, chunkName string, off int) *lua.FunctionProto {
	c := *p
	c.SourceName = chunkName
	if off > 0 {
		if c.LineDefined > 0 {
			c.LineDefined += off
			c.LastLineDefined += off
		}
		c.DbgSourcePositions = make([]int, len(p.DbgSourcePositions))
		for i, l := range p.DbgSourcePositions {
			if l > 0 {
				l += off
			}
			c.DbgSourcePositions[i] = l
		}
	}
	if len(p.FunctionPrototypes) > 0 {
		c.FunctionPrototypes = make([]*lua.FunctionProto, len(p.FunctionPrototypes))
		for i, f := range p.FunctionPrototypes {
			c.FunctionPrototypes[i] = relabel(f, chunkName, off)
		}
	}
	return &c
}

// refused says why source is not compiled at all, or "".
func refused(source string) string {
	if strings.HasPrefix(source, "\x1bLua") {
		return "binary (precompiled) chunks are not supported"
	}
	if len(source) > MaxSourceBytes {
		return "source is larger than " + mib(MaxSourceBytes)
	}
	return ""
}

// compile parses and compiles source. An error is a parse error or a *lua.CompileError.
func compile(chunkName, source string) (*lua.FunctionProto, error) {
	chunk, err := parse.Parse(strings.NewReader(source), chunkName)
	if err != nil {
		return nil, err
	}
	return lua.Compile(avoidMiscompiles(chunk), chunkName)
}

// syntaxError turns an error of compile into "chunk:line: message near 'token'", or
// "chunk:line: message" from the compiler, its line off lines further down.
func syntaxError(chunkName, source string, off int, err error) error {
	var ce *lua.CompileError
	if errors.As(err, &ce) {
		return &ScriptError{Msg: fmt.Sprintf("%s:%d: %s", chunkName, ce.Line+off, ce.Message)}
	}
	line, msg := syntaxPosition(source, err)
	if line == 0 {
		return &ScriptError{Msg: chunkName + ": " + msg}
	}
	return &ScriptError{Msg: fmt.Sprintf("%s:%d: %s", chunkName, line+off, msg)}
}

// syntaxPosition splits a parse error into its line (0 when it has none)
// and "message near 'token'".
func syntaxPosition(source string, err error) (int, string) {
	var pe *parse.Error
	if !errors.As(err, &pe) {
		return 0, strings.TrimSpace(err.Error())
	}
	lines := strings.Split(source, "\n")
	if pe.Pos.Line == parse.EOF {
		line, msg := strings.Count(source, "\n")+1, pe.Message+" near <eof>"
		// An expression or argument list left open at the end: its line,
		// not the one past the end.
		if last := lastCodeLine(lines, len(lines)); last > 0 {
			c := codeOf(lines[last-1])
			if danglingOperator(c) != "" || strings.HasSuffix(c, ",") || strings.HasSuffix(c, "(") {
				return last, msg
			}
		}
		return line, msg
	}
	line, msg := pe.Pos.Line, fmt.Sprintf("%s near '%s'", pe.Message, pe.Token)
	// The parser notices an expression left unfinished by a trailing
	// operator only at the next statement: name the line that holds it.
	if line >= 1 && line <= len(lines) && strings.HasPrefix(strings.TrimSpace(lines[line-1]), pe.Token) {
		if prev := lastCodeLine(lines, line-1); prev > 0 {
			if op := danglingOperator(lines[prev-1]); op != "" {
				return prev, fmt.Sprintf("%s: the expression ends in '%s' with nothing after it", msg, op)
			}
		}
	}
	return line, msg
}

// lastCodeLine is the number of the last of the first n lines that holds
// code (not blank, not only a -- comment), or 0.
func lastCodeLine(lines []string, n int) int {
	for i := min(n, len(lines)); i > 0; i-- {
		if t := codeOf(lines[i-1]); t != "" {
			return i
		}
	}
	return 0
}

// codeOf is a line without its -- comment and surrounding space (a "--"
// inside a string cuts it too, which only makes danglingOperator miss).
func codeOf(line string) string {
	if i := strings.Index(line, "--"); i >= 0 {
		line = line[:i]
	}
	return strings.TrimSpace(line)
}

// danglingOperators are the operators an expression cannot end with.
var danglingOperators = []string{"..", "==", "~=", "<=", ">=", "+", "-", "*", "/", "%", "^", "<", ">", "="}

// danglingOperator returns the operator a line of code ends with ("+",
// "..", "and"), or "".
func danglingOperator(line string) string {
	code := codeOf(line)
	for _, op := range danglingOperators {
		if strings.HasSuffix(code, op) {
			return op
		}
	}
	for _, kw := range []string{"and", "or", "not"} {
		if code == kw || strings.HasSuffix(code, " "+kw) || strings.HasSuffix(code, ")"+kw) {
			return kw
		}
	}
	return ""
}

// CheckSyntax compiles source without running or caching it, as a step's
// body would be compiled, and returns where it does not compile: the line
// within source (0 when the error has none) and what is wrong; msg is ""
// when it compiles.
func CheckSyntax(source string) (line int, msg string) {
	if msg := refused(source); msg != "" {
		return 0, msg
	}
	_, err := compile("check", source)
	var ce *lua.CompileError
	switch {
	case err == nil:
		return 0, ""
	case errors.As(err, &ce):
		return ce.Line, ce.Message
	}
	return syntaxPosition(source, err)
}

// errModuleNotFound is returned by findModule when no source has the module.
var errModuleNotFound = errors.New("module not found")

// findModule reads the source of a Lua module from ModuleDirs, then Bundled. name must be
// valid.
func (rt *Runtime) findModule(name string) (chunkName, source string, err error) {
	base := strings.ReplaceAll(name, ".", "/")
	candidates := []string{base + ".lua", base + "/init.lua"}
	for _, d := range rt.dirs {
		for _, rel := range candidates {
			src, err := readInRoot(d.dir, filepath.FromSlash(rel))
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return "", "", err
			}
			return path.Join(d.chunk, rel), src, nil
		}
	}
	if rt.bundled != nil {
		for _, rel := range candidates {
			data, err := fs.ReadFile(rt.bundled, rel)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return "", "", err
			}
			return path.Join(rt.bundledName, rel), string(data), nil
		}
	}
	return "", "", errModuleNotFound
}

// searched describes where findModule looks, for "not found" messages.
func (rt *Runtime) searched() string {
	var where []string
	for _, d := range rt.dirs {
		where = append(where, d.chunk)
	}
	if rt.bundled != nil {
		where = append(where, rt.bundledName+" (bundled)")
	}
	if len(where) == 0 {
		return "no module folders"
	}
	return strings.Join(where, ", ")
}

// readInRoot reads dir/rel without leaving dir, up to MaxSourceBytes.
func readInRoot(dir, rel string) (string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return "", err
	}
	defer root.Close()
	info, err := root.Stat(rel)
	if err != nil {
		return "", err
	}
	if !info.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", rel)
	}
	f, err := root.Open(rel)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSourceBytes+1))
	if err != nil {
		return "", err
	}
	if len(data) > MaxSourceBytes {
		return "", fmt.Errorf("%s is larger than %s", rel, mib(MaxSourceBytes))
	}
	return string(data), nil
}
