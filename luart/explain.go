package luart

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
)

// indexRE matches gopher-lua's message for indexing a value that is not a table: it names
// the value's type and the key, never the expression that held the value. callMsg is its
// message for calling a value that is not a function, which names neither.
var indexRE = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^attempt to index a non-table object\(([a-z]+)\) with key '(.*)'$`)
})

const callMsg = "attempt to call a non-function object"

// explain returns msg, a Lua error message with its "chunk:line: " position, made clearer
// where gopher-lua's own is terse: indexing a value that is not a table, or calling one that
// is not a function, names the expression that held it, read from the chunk's line
// ("attempt to index nil value 'ctx.outputs.fetch' with key 'rows'", "attempt to call a
// non-function value 'helper.run'"). A message it cannot improve is returned as it is.
func (s *State) explain(msg string) string {
	pos := position(msg)
	if pos == "" {
		return msg
	}
	rest := msg[len(pos):]
	line, ok := s.sourceLine(pos)
	if m := indexRE().FindStringSubmatch(rest); m != nil {
		typ, key := m[1], m[2]
		var exprs []string
		if ok {
			exprs = s.narrow(indexedExprs(line, key), func(v lua.LValue) bool { return v.Type().String() == typ })
		}
		return fmt.Sprintf("%sattempt to index %s value%s with key '%s'", pos, typ, naming(exprs), key)
	}
	if rest == callMsg && ok {
		exprs := s.narrow(calledExprs(line), func(v lua.LValue) bool { return v.Type() != lua.LTFunction })
		if len(exprs) > 0 {
			return fmt.Sprintf("%sattempt to call a non-function value%s", pos, naming(exprs))
		}
	}
	return msg
}

// naming is how a message names the candidate expressions: " 'a'", " (one of 'a', 'b')", or
// "" for none.
func naming(exprs []string) string {
	switch len(exprs) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(" '%s'", exprs[0])
	}
	return " (one of '" + strings.Join(exprs, "', '") + "')"
}

// narrow keeps, of several candidate expressions, those that may have held the value the
// error is about: a candidate whose value the state's globals tell (a dotted name from a
// global, read without metamethods) is kept only when fits says the value fits the error.
// Locals are gone once the error unwound the stack, and may shadow a global of the same
// name, so narrowing never drops every candidate, nor the only one.
func (s *State) narrow(exprs []string, fits func(lua.LValue) bool) []string {
	if len(exprs) < 2 {
		return exprs
	}
	var kept []string
	for _, e := range exprs {
		if v, known := s.globalValue(e); !known || fits(v) {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		return exprs
	}
	return kept
}

// globalValue reads expr, names joined by dots, from the state's globals without running
// any metamethod; known is false for an expression it cannot read so.
func (s *State) globalValue(expr string) (v lua.LValue, known bool) {
	var cur lua.LValue = s.ls.G.Global
	for _, part := range strings.Split(expr, ".") {
		t, ok := cur.(*lua.LTable)
		if !ok || !identRE().MatchString(part) {
			return nil, false
		}
		cur = t.RawGetString(part)
	}
	return cur, true
}

// calledExprs returns the expressions on one line of Lua source that are called (f(...),
// a.b(...), obj:m(...)), each once, in order; not the names a function statement defines.
func calledExprs(line string) []string {
	code := maskStrings(line)
	var out []string
	for i := 0; i < len(code); i++ {
		if code[i] != '(' || i == 0 || !(isNameByte(code[i-1]) || code[i-1] == ']' || code[i-1] == ')') {
			continue
		}
		e := prefixExpr(code, line, i)
		if e == "" || definesFunction(code, i-len(e)) {
			continue
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out
}

// definesFunction reports whether the expression at index from of code follows the keyword
// function: `function M.f(x)` defines M.f, it does not call it.
func definesFunction(code string, from int) bool {
	before := strings.TrimRight(code[:from], " \t")
	word := len(before) - len("function")
	return strings.HasSuffix(before, "function") && (word == 0 || !isNameByte(before[word-1]))
}

// sourceLine returns the line of a chunk compiled in this state that pos ("chunk:line: ")
// names; not one longer than maxExplainedLine.
func (s *State) sourceLine(pos string) (string, bool) {
	i := strings.LastIndexByte(strings.TrimSuffix(pos, ": "), ':')
	if i < 0 {
		return "", false
	}
	n, err := strconv.Atoi(pos[i+1 : len(pos)-2])
	src, ok := s.chunks[pos[:i]]
	n -= src.offset
	if err != nil || !ok || n < 1 {
		return "", false
	}
	for line := range strings.Lines(src.text) {
		if n--; n == 0 {
			line = strings.TrimRight(line, "\r\n")
			return line, len(line) <= maxExplainedLine
		}
	}
	return "", false
}

// maxExplainedLine bounds the line sourceLine returns for indexedExprs and calledExprs to
// read: a minified chunk's one line is not worth scanning for a message.
const maxExplainedLine = 4096

// indexedExprs returns the expressions on one line of Lua source that are indexed with key
// (expr.key, expr:key(...), expr["key"], and expr[k] when no index names key itself), each
// once, in the order they appear: the candidates for the value a runtime error says could
// not be indexed. Strings and comments are skipped. It reads text, not an AST, so an
// expression spread over lines is not found.
func indexedExprs(line, key string) []string {
	code := maskStrings(line)
	var exact, other []string
	for i := 0; i < len(code); i++ {
		c := code[i]
		if c != '.' && c != ':' && c != '[' {
			continue
		}
		var match, wild bool
		switch c {
		case '.', ':':
			if c == '.' && (i+1 < len(code) && code[i+1] == '.' || i > 0 && code[i-1] == '.') {
				continue // concatenation or varargs
			}
			j := i + 1
			for j < len(code) && isNameByte(code[j]) {
				j++
			}
			match = line[i+1:j] == key
		case '[':
			end := closing(code, i, '[', ']')
			if end < 0 {
				continue
			}
			inner := strings.TrimSpace(line[i+1 : end])
			switch {
			case len(inner) >= 2 && (inner[0] == '"' || inner[0] == '\'') && inner[len(inner)-1] == inner[0]:
				match = inner[1:len(inner)-1] == key
			case inner != "" && (inner[0] >= '0' && inner[0] <= '9' || inner[0] == '-'):
				match = inner == key
			default:
				wild = inner != ""
			}
		}
		if !match && !wild {
			continue
		}
		e := prefixExpr(code, line, i)
		if e == "" {
			continue
		}
		list := &other
		if match {
			list = &exact
		}
		if !slices.Contains(*list, e) {
			*list = append(*list, e)
		}
	}
	if len(exact) > 0 {
		return exact
	}
	return other
}

// prefixExpr returns the expression of line that ends just before index i of code (line with
// its strings masked): names joined by "." or ":", indexes and calls, as in
// ctx.outputs["fetch"] or get(x).data. It is "" when none ends there.
func prefixExpr(code, line string, i int) string {
	j := i
	for {
		switch {
		case j > 0 && isNameByte(code[j-1]):
			k := j
			for k > 0 && isNameByte(code[k-1]) {
				k--
			}
			if code[k] >= '0' && code[k] <= '9' || luaKeywords[code[k:j]] {
				return expr(line, j, i)
			}
			j = k
			if j > 0 && (code[j-1] == '.' || code[j-1] == ':') && !(j > 1 && code[j-2] == '.') {
				j--
				continue
			}
			return expr(line, j, i)
		case j > 0 && (code[j-1] == ']' || code[j-1] == ')'):
			open := byte('[')
			if code[j-1] == ')' {
				open = '('
			}
			k := opening(code, j-1, open, code[j-1])
			if k < 0 {
				return ""
			}
			j = k
			if j > 0 && (isNameByte(code[j-1]) || code[j-1] == ']' || code[j-1] == ')') {
				continue // an index or a call of what comes before
			}
			if open == '[' {
				return "" // a table constructor's key, not an index
			}
			return expr(line, j, i) // a parenthesized expression
		default:
			return expr(line, j, i)
		}
	}
}

// expr is line[from:to], or "" when that is empty.
func expr(line string, from, to int) string {
	return strings.TrimSpace(line[from:to])
}

// maskStrings returns line with the contents of its string literals blanked and its comment
// cut, the same length up to the comment: brackets, dots and names inside strings are not code.
func maskStrings(line string) string {
	b := []byte(line)
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"' || c == '\'':
			j := i + 1
			for j < len(b) && b[j] != c {
				if b[j] == '\\' {
					b[j] = ' '
					j++
				}
				if j < len(b) {
					b[j] = ' '
				}
				j++
			}
			i = j
		case c == '-' && i+1 < len(b) && b[i+1] == '-':
			return string(b[:i])
		case c == '[' && i+1 < len(b) && (b[i+1] == '[' || b[i+1] == '='):
			j := i + 1
			for j < len(b) && b[j] == '=' {
				j++
			}
			if j >= len(b) || b[j] != '[' {
				continue
			}
			end := strings.Index(string(b[j+1:]), "]"+strings.Repeat("=", j-i-1)+"]")
			if end < 0 {
				end = len(b) - j - 1
			}
			for k := j + 1; k < j+1+end; k++ {
				b[k] = ' '
			}
			i = j + end
		}
	}
	return string(b)
}

// closing returns the index of the bracket that closes the one at i, or -1.
func closing(code string, i int, open, close byte) int {
	depth := 0
	for j := i; j < len(code); j++ {
		switch code[j] {
		case open:
			depth++
		case close:
			if depth--; depth == 0 {
				return j
			}
		}
	}
	return -1
}

// opening returns the index of the bracket that opens the one at i, or -1.
func opening(code string, i int, open, close byte) int {
	depth := 0
	for j := i; j >= 0; j-- {
		switch code[j] {
		case close:
			depth++
		case open:
			if depth--; depth == 0 {
				return j
			}
		}
	}
	return -1
}

func isNameByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// luaKeywords are the words that end an expression read backwards.
var luaKeywords = map[string]bool{
	"and": true, "break": true, "do": true, "else": true, "elseif": true, "end": true,
	"false": true, "for": true, "function": true, "if": true, "in": true, "local": true,
	"nil": true, "not": true, "or": true, "repeat": true, "return": true, "then": true,
	"true": true, "until": true, "while": true,
}
