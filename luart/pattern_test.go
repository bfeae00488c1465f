package luart

import (
	"errors"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// TestPatterns checks the replaced string functions against Lua 5.1's results (where
// gopher-lua's own differ: match returning nothing instead of nil, %f frontiers, a '^' in
// gmatch, malformed patterns accepted).
func TestPatterns(t *testing.T) {
	t.Parallel()
	tests := []struct{ code, want string }{
		{`return string.find("hello world", "o w")`, "5 7"},
		{`return string.find("hello", "l+")`, "3 4"},
		{`return string.find("hello", "xyz")`, "nil"},
		{`return string.find("a.b", ".", 1, true)`, "2 2"},
		{`return string.find("a+b", "%+")`, "2 2"},
		{`return string.find("hello", "")`, "1 0"},
		{`return string.find("hello", "", 10)`, "6 5"},
		{`return string.find("hello", "l", -2)`, "4 4"},
		{`return string.find("key = value", "(%w+)%s*=%s*(%w+)")`, "1 11 key value"},
		{`return string.find("abc", "()b()")`, "2 2 2 3"},
		{`return string.find("a)b", ")")`, "2 2"},
		{`return string.match("  trim me  ", "^%s*(.-)%s*$")`, "trim me"},
		{`return string.match("2024-01-15", "(%d+)-(%d+)-(%d+)")`, "2024 01 15"},
		{`return string.match("hello", "xyz")`, "nil"},
		{`return string.match("f(a(b)c)d", "%b()")`, "(a(b)c)"},
		{`return string.match("THE (quick) fox", "%f[%a]%a+", 5)`, "quick"},
		{`return string.match("hello", ".-l")`, "hel"},
		{`return string.match("abcabc", "(abc)%1")`, "abc"},
		{`return string.match("]", "[]]")`, "]"},
		{`return string.match("a-b", "[a-]+")`, "a-"},
		{`return string.match("x9_", "[%a_][%w_]*")`, "x9_"},
		{`return string.match("A1 b2", "%u%d")`, "A1"},
		{`return string.match("tab\there", "%s")`, "\t"},
		{`return string.match("a\0b", "%z")`, "\x00"},
		{`return string.match("^a", "^^a")`, "^a"},
		{`return string.match("hello", "()ll()")`, "3 5"},
		{`return string.gsub("hello world", "o", "0")`, "hell0 w0rld 2"},
		{`return string.gsub("hello world", "(%w+)", "<%1>")`, "<hello> <world> 2"},
		{`return string.gsub("abc", "%w", "%0%0")`, "aabbcc 3"},
		{`return string.gsub("abc", "", "-")`, "-a-b-c- 4"},
		{`return string.gsub("hello world", "%w+", "X", 1)`, "X world 1"},
		{`return string.gsub("$name is $age", "%$(%w+)", {name = "Bob", age = 42})`, "Bob is 42 2"},
		{`return string.gsub("abc", "%w", function(c) if c == "b" then return false end return c:upper() end)`, "AbC 3"},
		{`return string.gsub("aaa", "^a", "x")`, "xaa 1"},
		{`return string.gsub("a,b", ",", "%%")`, "a%b 1"},
		{`return string.gsub("abc", "(b)", "%1%1")`, "abbc 1"},
		{`return string.gsub("x", "x", {})`, "x 1"},
		{`return string.gsub("x = 1", "(%w+) = (%w+)", "%2 = %1")`, "1 = x 1"},
		{`return string.gsub("abc", "b", 7)`, "a7c 1"},
		{`local r = {} for w in ("one two  three"):gmatch("%a+") do r[#r+1] = w end return table.concat(r, ",")`, "one,two,three"},
		{`local r = {} for k, v in ("a=1, b=2"):gmatch("(%w+)=(%w+)") do r[#r+1] = k .. v end return table.concat(r, ",")`, "a1,b2"},
		{`local n = 0 for w in ("abc"):gmatch("") do n = n + 1 end return n`, "4"},
		{`local r = {} for p in ("ab"):gmatch("()") do r[#r+1] = p end return table.concat(r, ",")`, "1,2,3"},
		{`local r = {} for w in ("^a^a"):gmatch("^a") do r[#r+1] = w end return #r`, "2"},
		{`local it = ("a b"):gmatch("%a") return it(), it(), select("#", it())`, "a b 0"},
		{`return ("%d items, %s"):format(3, "ok")`, "3 items, ok"},
		{`return string.rep("ab", 3), string.rep("x", 0), string.rep("x", -1)`, "ababab  "},
		{`return table.concat({1, "a", 2.5}, "-"), table.concat({}, "x"), table.concat({"a", "b", "c"}, ",", 2, 3)`, "1-a-2.5  b,c"},
	}
	s := newState(t, New(Options{}), StateOptions{})
	for _, tt := range tests {
		res, err := s.DoChunk("pattern.lua", tt.code)
		if err != nil {
			t.Errorf("%s: %v", tt.code, err)
			continue
		}
		got := make([]string, len(res))
		for i, r := range res {
			got[i] = r.String()
		}
		if g := strings.Join(got, " "); g != tt.want {
			t.Errorf("%s = %q, want %q", tt.code, g, tt.want)
		}
	}
}

func TestPatternErrors(t *testing.T) {
	t.Parallel()
	tests := []struct{ code, want string }{
		{`string.find("a", "[a")`, "malformed pattern (missing ']')"},
		{`string.find("a", "%")`, "malformed pattern (ends with '%')"},
		{`string.match("a", "(()")`, "unfinished capture"},
		{`string.match("a", "%1")`, "invalid capture index"},
		{`string.match("a", "a)")`, "invalid pattern capture"},
		{`string.match("a", "%b")`, "unbalanced pattern"},
		{`string.match("a", "%fa")`, "missing '[' after '%f' in pattern"},
		{`string.gsub("abc", "b", "%2")`, "invalid capture index"},
		{`string.gsub("abc", "b", "%")`, "invalid use of '%' in replacement string"},
		{`string.gsub("x", "x", function() return {} end)`, "invalid replacement value (a table)"},
		{`string.gsub("x", "x", true)`, "bad argument #3 to gsub (string/function/table expected)"},
		{`string.match(("a"):rep(300), ("a?"):rep(300))`, "pattern too complex"},
		{`string.match("a", ("()"):rep(33))`, "too many captures"},
		{`table.concat({1, {}, 3})`, "invalid value (at index 2) in table for 'concat'"},
	}
	s := newState(t, New(Options{}), StateOptions{})
	for _, tt := range tests {
		_, err := s.DoChunk("pattern.lua", tt.code)
		var se *ScriptError
		if !errors.As(err, &se) || !strings.Contains(se.Msg, tt.want) || !strings.HasPrefix(se.Msg, "pattern.lua:1: ") {
			t.Errorf("%s: error = %v, want pattern.lua:1: ...%s", tt.code, err, tt.want)
		}
	}
	if res, err := s.DoChunk("after.lua", "return 1"); err != nil || res[0] != lua.LNumber(1) {
		t.Errorf("state unusable after pattern errors: %v, %v", res, err)
	}
}
