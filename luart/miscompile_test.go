package luart

import (
	"bytes"
	"testing"
)

// TestMiscompiledAssignments: the assignments gopher-lua v1.1.2 compiles
// wrongly (issues #440 and #490) give Lua's values in the sandbox, in a
// chunk and in nested functions and blocks, and the line of an error in
// one is still its own.
func TestMiscompiledAssignments(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	s := newState(t, New(Options{}), StateOptions{Print: &out})
	_, err := s.DoChunk("assign.lua", `
		local function f() return false end
		local function g() return true end
		local function gt(x, y) return x > y end
		local function lt(x, y) return x < y end
		local a, b = 0, 0
		a, b = a + 1, a + b
		print(a, b)                             -- 1 0
		a, b = 5, a
		print(a, b)                             -- 5 1
		local r = true
		r = r and gt(2, 3) and lt(2, 5)
		print(r)                                -- false
		local q = true
		r = q and f() and q
		print(r)                                -- false
		r = (q and f()) and g()
		print(r)                                -- false
		local function inner()
			local x, y = 1, 2
			for i = 1, 2 do
				if i == 2 then x, y = y, x end
			end
			return x, y
		end
		print(inner())                          -- 2 1
		local t = {}
		t.n, a = 7, t.n
		print(t.n, a)                           -- 7 nil
		local c1, c2 = 1, 2
		c1, c2 = c2 + 0, c1 + 0
		print(c1, c2)                           -- 2 1
		local m, n = (function() return 3, 4 end)()
		m, n = (function() return n, m end)()
		print(m, n)                             -- 4 3
		local e, h = 1, nil
		e, h = 2, h + 1                         -- line 37: arithmetic on nil
	`)
	want := "1\t0\n5\t1\nfalse\nfalse\nfalse\n2\t1\n7\tnil\n2\t1\n4\t3\n"
	if got := out.String(); got != want {
		t.Errorf("output:\n%s\nwant:\n%s", got, want)
	}
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("assign.lua:37:")) {
		t.Errorf("error %v, want one at assign.lua:42", err)
	}
}
