package luart

import (
	"fmt"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// The builtins below replace gopher-lua's where one Go call could run without end or allocate
// without bound; the context is only checked between VM instructions.
//   - string.find, match, gmatch, gsub: a matcher that checks the context (pattern.go); gmatch
//     is lazy (gopher-lua's finds every match up front); gsub builds its result linearly
//     (gopher-lua's copies the whole subject at every match).
//   - string.rep: capped at min(16 MiB, the memory limit).
//   - table.concat: no registry use (gopher-lua pushes every element on the value stack), result
//     capped at the memory limit, context checked.
//   - string.format: gopher-lua's, after an estimate of the result size checked against the
//     memory limit (a "%999999d" makes a megabyte from eight bytes).
// A result over its cap stops the state with ErrMemory.

// maxRepBytes is the most string.rep makes, when the memory limit is larger.
const maxRepBytes = 16 << 20

// checkStop raises a Lua error when the state's context has ended.
func (s *State) checkStop(L *lua.LState) {
	select {
	case <-s.ctx.Done():
		L.RaiseError("%s", s.ctx.Err().Error())
	default:
	}
}

// memoryStop stops the state with ErrMemory and raises a Lua error saying why.
func (s *State) memoryStop(L *lua.LState, format string, args ...any) {
	detail := fmt.Sprintf(format, args...)
	s.cancel(fmt.Errorf("%w: %s", ErrMemory, detail))
	L.RaiseError("%s: %s", ErrMemory.Error(), detail)
}

func mib(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// installBuiltins puts the state's own string and table functions into str and tbl; format is
// gopher-lua's string.format, which the sandbox's checks and then calls.
func (s *State) installBuiltins(L *lua.LState, str, tbl *lua.LTable, format lua.LGFunction) {
	str.RawSetString("rep", L.NewFunction(s.strRep))
	str.RawSetString("find", L.NewFunction(s.strFind))
	str.RawSetString("match", L.NewFunction(s.strMatch))
	gmatch := L.NewFunction(s.strGmatch)
	str.RawSetString("gmatch", gmatch)
	str.RawSetString("gfind", gmatch)
	str.RawSetString("gsub", L.NewFunction(s.strGsub))
	str.RawSetString("format", L.NewFunction(func(L *lua.LState) int {
		s.checkFormat(L)
		return format(L)
	}))
	tbl.RawSetString("concat", L.NewFunction(s.tableConcat))
}

func (s *State) strRep(L *lua.LState) int {
	str := L.CheckString(1)
	n := float64(L.CheckNumber(2))
	if n < 1 || len(str) == 0 {
		L.Push(lua.LString(""))
		return 1
	}
	capBytes := min(s.limit, maxRepBytes)
	if n*float64(len(str)) > float64(capBytes) {
		s.memoryStop(L, "string.rep would make %.0f bytes (cap %s)", n*float64(len(str)), mib(capBytes))
	}
	L.Push(lua.LString(strings.Repeat(str, int(n))))
	return 1
}

func (s *State) tableConcat(L *lua.LState) int {
	t := L.CheckTable(1)
	sep := L.OptString(2, "")
	i := L.OptInt(3, 1)
	j := L.OptInt(4, t.Len())
	if i > j {
		L.Push(lua.LString(""))
		return 1
	}
	piece := func(k int) string {
		switch v := t.RawGetInt(k).(type) {
		case lua.LString:
			return string(v)
		case lua.LNumber:
			return v.String()
		default:
			L.RaiseError("invalid value (at index %d) in table for 'concat'", k)
			return ""
		}
	}
	var total int64
	for k := i; k <= j; k++ {
		if (k-i)&(stepsPerCheck-1) == stepsPerCheck-1 {
			s.checkStop(L)
		}
		total += int64(len(piece(k)))
		if k < j {
			total += int64(len(sep))
		}
		if total > s.limit {
			s.memoryStop(L, "table.concat would make more than %s", mib(s.limit))
		}
	}
	var b strings.Builder
	b.Grow(int(total))
	for k := i; k <= j; k++ {
		b.WriteString(piece(k))
		if k < j {
			b.WriteString(sep)
		}
	}
	L.Push(lua.LString(b.String()))
	return 1
}

// checkFormat estimates the largest result string.format could make from its arguments and
// stops the state if it is over the memory limit. Go's fmt (which gopher-lua's format uses)
// caps a width or precision at 1e6.
func (s *State) checkFormat(L *lua.LState) {
	f := L.CheckString(1)
	const maxWidth = 1_000_000
	argLen := func(n int) int64 {
		if n > L.GetTop() {
			return 0
		}
		if v, ok := L.Get(n).(lua.LString); ok {
			return int64(len(v))
		}
		return 400 // a number or a tostring'd value: "%f" of 1e308 has 316 characters
	}
	total := int64(len(f))
	arg := 2
	for i := 0; i < len(f); i++ {
		if f[i] != '%' {
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			continue
		}
		var width, prec int64
		for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
			i++
		}
		for i < len(f) && isDigit(f[i]) {
			width = min(width*10+int64(f[i]-'0'), maxWidth)
			i++
		}
		if i < len(f) && f[i] == '.' {
			i++
			for i < len(f) && isDigit(f[i]) {
				prec = min(prec*10+int64(f[i]-'0'), maxWidth)
				i++
			}
		}
		if i < len(f) && (f[i] == '*' || f[i] == '[') {
			// Go-only syntax (argument indexes, widths from arguments): assume the worst.
			var longest int64
			for n := 2; n <= L.GetTop(); n++ {
				longest = max(longest, argLen(n))
			}
			total += 2*maxWidth + longest
		} else {
			total += width + prec + argLen(arg)
		}
		arg++
		if total > s.limit {
			s.memoryStop(L, "string.format could make more than %s", mib(s.limit))
		}
	}
}

func (s *State) newMatcher(L *lua.LState, src, pat string) *matcher {
	return &matcher{L: L, src: src, pat: pat, stop: func() { s.checkStop(L) }}
}

// posrelat turns a Lua string index (negative from the end) into a 0-based offset clamped to
// [0, n].
func posrelat(pos, n int) int {
	if pos < 0 {
		pos = n + pos + 1
	}
	pos--
	return max(0, min(pos, n))
}

func (s *State) strFind(L *lua.LState) int { return s.findAux(L, true) }

func (s *State) strMatch(L *lua.LState) int { return s.findAux(L, false) }

func (s *State) findAux(L *lua.LState, find bool) int {
	src := L.CheckString(1)
	pat := L.CheckString(2)
	init := posrelat(L.OptInt(3, 1), len(src))
	if find && (lua.LVAsBool(L.Get(4)) || !strings.ContainsAny(pat, patSpecials)) {
		if i := strings.Index(src[init:], pat); i >= 0 {
			L.Push(lua.LNumber(init + i + 1))
			L.Push(lua.LNumber(init + i + len(pat)))
			return 2
		}
		L.Push(lua.LNil)
		return 1
	}
	m := s.newMatcher(L, src, pat)
	p := 0
	anchor := len(pat) > 0 && pat[0] == '^'
	if anchor {
		p = 1
	}
	for s1 := init; ; s1++ {
		m.reset()
		if e := m.match(s1, p); e != -1 {
			if find {
				L.Push(lua.LNumber(s1 + 1))
				L.Push(lua.LNumber(e))
				return m.pushCaptures(L, s1, e, false) + 2
			}
			return m.pushCaptures(L, s1, e, true)
		}
		if s1 >= len(src) || anchor {
			break
		}
	}
	L.Push(lua.LNil)
	return 1
}

func (s *State) strGmatch(L *lua.LState) int {
	src := L.CheckString(1)
	pat := L.CheckString(2)
	pos := 0
	L.Push(L.NewFunction(func(L *lua.LState) int {
		m := s.newMatcher(L, src, pat)
		for start := pos; start <= len(src); start++ {
			m.reset()
			if e := m.match(start, 0); e != -1 {
				pos = e
				if e == start {
					pos++ // an empty match: go on at the next position
				}
				return m.pushCaptures(L, start, e, true)
			}
		}
		pos = len(src) + 1
		return 0
	}))
	return 1
}

func (s *State) strGsub(L *lua.LState) int {
	src := L.CheckString(1)
	pat := L.CheckString(2)
	repl := L.Get(3)
	switch repl.Type() {
	case lua.LTNumber, lua.LTString, lua.LTTable, lua.LTFunction:
	default:
		L.ArgError(3, "string/function/table expected")
	}
	maxN := L.OptInt(4, len(src)+1)
	m := s.newMatcher(L, src, pat)
	p := 0
	anchor := len(pat) > 0 && pat[0] == '^'
	if anchor {
		p = 1
	}
	var b strings.Builder
	grow := func() {
		if int64(b.Len()) > s.limit {
			s.memoryStop(L, "string.gsub would make more than %s", mib(s.limit))
		}
	}
	n, at := 0, 0
	for n < maxN {
		m.reset()
		e := m.match(at, p)
		if e != -1 {
			n++
			s.gsubValue(L, m, &b, at, e, repl)
			grow()
		}
		switch {
		case e != -1 && e > at:
			at = e
		case at < len(src):
			b.WriteByte(src[at])
			at++
		default:
			at = len(src) + 1 // done
		}
		if at > len(src) || anchor {
			break
		}
	}
	if at < len(src) {
		b.WriteString(src[at:])
		grow()
	}
	L.Push(lua.LString(b.String()))
	L.Push(lua.LNumber(n))
	return 2
}

func (s *State) gsubValue(L *lua.LState, m *matcher, b *strings.Builder, start, end int, repl lua.LValue) {
	var v lua.LValue
	switch r := repl.(type) {
	case lua.LString, lua.LNumber:
		news := lua.LVAsString(r)
		for i := 0; i < len(news); i++ {
			c := news[i]
			if c != '%' {
				b.WriteByte(c)
				continue
			}
			i++
			switch {
			case i == len(news):
				L.RaiseError("%s", "invalid use of '%' in replacement string")
			case news[i] == '0':
				b.WriteString(m.src[start:end])
			case isDigit(news[i]):
				b.WriteString(lua.LVAsString(m.captureValue(int(news[i]-'1'), start, end)))
			default:
				b.WriteByte(news[i])
			}
		}
		return
	case *lua.LFunction:
		top := L.GetTop()
		L.Push(r)
		n := m.pushCaptures(L, start, end, true)
		L.Call(n, 1)
		v = L.Get(-1)
		L.SetTop(top)
	case *lua.LTable:
		v = L.GetTable(r, m.captureValue(0, start, end))
	}
	switch v.(type) {
	case *lua.LNilType:
		b.WriteString(m.src[start:end])
	case lua.LBool:
		if v == lua.LFalse {
			b.WriteString(m.src[start:end])
		} else {
			L.RaiseError("invalid replacement value (a boolean)")
		}
	case lua.LString, lua.LNumber:
		b.WriteString(lua.LVAsString(v))
	default:
		L.RaiseError("invalid replacement value (a %s)", v.Type().String())
	}
}
