package luart

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// indexRE matches gopher-lua's message for indexing a value that is not a table: it names
// the value's type and the key, never the expression that held the value.
var indexRE = regexp.MustCompile(`^attempt to index a non-table object\(([a-z]+)\) with key '(.*)'$`)

// explain returns msg, a Lua error message with its "chunk:line: " position, made clearer
// where gopher-lua's own is terse: indexing a nil value names the expression that was nil,
// read from the chunk's line ("attempt to index nil value 'ctx.outputs.fetch' with key
// 'rows'"). A message it cannot improve is returned as it is.
func (s *State) explain(msg string) string {
	pos := position(msg)
	m := indexRE.FindStringSubmatch(msg[len(pos):])
	if pos == "" || m == nil {
		return msg
	}
	typ, key := m[1], m[2]
	what := ""
	if line, ok := s.sourceLine(pos); ok {
		exprs := indexedExprs(line, key)
		switch len(exprs) {
		case 0:
		case 1:
			what = fmt.Sprintf(" '%s'", exprs[0])
		default:
			what = " (one of '" + strings.Join(exprs, "', '") + "')"
		}
	}
	return fmt.Sprintf("%sattempt to index %s value%s with key '%s'", pos, typ, what, key)
}

// sourceLine returns the line of a chunk compiled in this state that pos ("chunk:line: ")
// names.
func (s *State) sourceLine(pos string) (string, bool) {
	i := strings.LastIndexByte(strings.TrimSuffix(pos, ": "), ':')
	if i < 0 {
		return "", false
	}
	n, err := strconv.Atoi(pos[i+1 : len(pos)-2])
	src, ok := s.chunks[pos[:i]]
	if err != nil || !ok || n < 1 {
		return "", false
	}
	for line := range strings.Lines(src) {
		if n--; n == 0 {
			return strings.TrimRight(line, "\r\n"), true
		}
	}
	return "", false
}

// maxExplainedLine bounds the line indexedExprs reads: a minified chunk's one line is not
// worth scanning for a message.
const maxExplainedLine = 4096

// indexedExprs returns the expressions on one line of Lua source that are indexed with key
// (expr.key, expr:key(...), expr["key"], and expr[k] when no index names key itself), each
// once, in the order they appear: the candidates for the value a runtime error says could
// not be indexed. Strings and comments are skipped. It reads text, not an AST, so an
// expression spread over lines is not found.
func indexedExprs(line, key string) []string {
	if len(line) > maxExplainedLine {
		return nil
	}
	code := maskStrings(line)
	var exact, other []string
	add := func(list *[]string, e string) {
		for _, x := range *list {
			if x == e {
				return
			}
		}
		*list = append(*list, e)
	}
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
		if match {
			add(&exact, e)
		} else {
			add(&other, e)
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
			if code[k] >= '0' && code[k] <= '9' || isKeyword(code[k:j]) {
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

func isKeyword(w string) bool { return luaKeywords[w] }
