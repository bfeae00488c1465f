package luart

import (
	"strconv"
	"strings"
	"testing"
)

// TestSyntaxErrorLine checks the line a syntax error names: where an
// expression left unfinished by a trailing operator is, not the next
// statement's line, where the parser noticed it.
func TestSyntaxErrorLine(t *testing.T) {
	tests := []struct {
		src      string
		line     int
		contains string
	}{
		{"local a = 1 +\nlocal b = 2\n", 1, "near 'local'"},
		{"local a = 1\n\nlocal s = a ..\n  -- a comment\n\nreturn s\n", 3, "near 'return'"},
		{"local x =\n", 1, "near <eof>"},
		{"local x = f(1,\n", 1, "near <eof>"},
		{"x = = 1\n", 1, "near '='"},
		{"local a = 1\nlocal b = )\n", 2, "near ')'"},
		{"local a = 1\n)\n", 2, "near ')'"},
	}
	for _, tt := range tests {
		line, msg := CheckSyntax(tt.src)
		if line != tt.line || !strings.Contains(msg, tt.contains) {
			t.Errorf("CheckSyntax(%q) = %d, %q; want line %d, a message with %q", tt.src, line, msg, tt.line, tt.contains)
		}
		_, err := New(Options{}).Compile("s.lua", tt.src)
		if want := "s.lua:" + strconv.Itoa(tt.line) + ": "; err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("Compile(%q) = %v; want it to start %q", tt.src, err, want)
		}
	}
}
