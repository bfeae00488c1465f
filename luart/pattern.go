package luart

import (
	lua "github.com/yuin/gopher-lua"
)

// A Lua 5.1 pattern matcher, written after the algorithm of lstrlib.c, that can be stopped.
// gopher-lua's own matcher (package pm) runs a whole search, and gmatch/gsub every match of a
// subject, inside one Go call that the state's context cannot interrupt; a backtracking pattern
// such as ("a*"):rep(30).."c" then runs for hours. This one counts its steps and calls stop every
// stepsPerCheck of them, which raises a Lua error once the state's context has ended.

const (
	capUnfinished = -1
	capPosition   = -2
	maxCaptures   = 32  // LUA_MAXCAPTURES
	maxMatchDepth = 200 // MAXCCALLS of Lua 5.2+: bounds the Go recursion a pattern can cause
	stepsPerCheck = 1 << 12
	patSpecials   = "^$*+?.([%-"
)

type capture struct {
	init, len int
}

type matcher struct {
	L     *lua.LState
	src   string
	pat   string
	level int // captures opened so far (closed or not)
	cap   [maxCaptures]capture
	depth int
	steps int
	stop  func() // raises a Lua error when the state must stop
}

func (m *matcher) tick() {
	m.steps++
	if m.steps&(stepsPerCheck-1) == 0 {
		m.stop()
	}
}

func (m *matcher) reset() {
	m.level = 0
	m.depth = 0
}

// match returns the end of the match of pat[p:] at src[s:], or -1.
func (m *matcher) match(s, p int) int {
	m.depth++
	if m.depth > maxMatchDepth {
		m.L.RaiseError("pattern too complex")
	}
	r := m.doMatch(s, p)
	m.depth--
	return r
}

func (m *matcher) doMatch(s, p int) int {
	src, pat := m.src, m.pat
	for {
		m.tick()
		if p == len(pat) {
			return s
		}
		switch pat[p] {
		case '(':
			if p+1 < len(pat) && pat[p+1] == ')' {
				return m.startCapture(s, p+2, capPosition)
			}
			return m.startCapture(s, p+1, capUnfinished)
		case ')':
			return m.endCapture(s, p+1)
		case '$':
			if p+1 == len(pat) {
				if s == len(src) {
					return s
				}
				return -1
			}
		case '%':
			if p+1 < len(pat) {
				switch c := pat[p+1]; {
				case c == 'b':
					s = m.matchBalance(s, p+2)
					if s == -1 {
						return -1
					}
					p += 4
					continue
				case c == 'f':
					p += 2
					if p >= len(pat) || pat[p] != '[' {
						m.L.RaiseError("%s", "missing '[' after '%f' in pattern")
					}
					ep := m.classEnd(p)
					var prev, cur byte
					if s > 0 {
						prev = src[s-1]
					}
					if s < len(src) {
						cur = src[s]
					}
					if m.matchBracketClass(prev, p, ep-1) || !m.matchBracketClass(cur, p, ep-1) {
						return -1
					}
					p = ep
					continue
				case isDigit(c):
					s = m.matchCapture(s, c)
					if s == -1 {
						return -1
					}
					p += 2
					continue
				}
			}
		}
		// A single-character class, maybe followed by a quantifier.
		ep := m.classEnd(p)
		ok := s < len(src) && m.singleMatch(src[s], p, ep)
		var q byte
		if ep < len(pat) {
			q = pat[ep]
		}
		switch q {
		case '?':
			if ok {
				if r := m.match(s+1, ep+1); r != -1 {
					return r
				}
			}
			p = ep + 1
		case '*':
			return m.maxExpand(s, p, ep)
		case '+':
			if !ok {
				return -1
			}
			return m.maxExpand(s+1, p, ep)
		case '-':
			return m.minExpand(s, p, ep)
		default:
			if !ok {
				return -1
			}
			s++
			p = ep
		}
	}
}

func (m *matcher) maxExpand(s, p, ep int) int {
	i := 0
	for s+i < len(m.src) && m.singleMatch(m.src[s+i], p, ep) {
		i++
		m.tick()
	}
	for ; i >= 0; i-- {
		if r := m.match(s+i, ep+1); r != -1 {
			return r
		}
	}
	return -1
}

func (m *matcher) minExpand(s, p, ep int) int {
	for {
		if r := m.match(s, ep+1); r != -1 {
			return r
		}
		if s < len(m.src) && m.singleMatch(m.src[s], p, ep) {
			s++
		} else {
			return -1
		}
	}
}

func (m *matcher) startCapture(s, p, what int) int {
	if m.level >= maxCaptures {
		m.L.RaiseError("too many captures")
	}
	m.cap[m.level] = capture{init: s, len: what}
	m.level++
	r := m.match(s, p)
	if r == -1 {
		m.level--
	}
	return r
}

func (m *matcher) endCapture(s, p int) int {
	l := -1
	for i := m.level - 1; i >= 0; i-- {
		if m.cap[i].len == capUnfinished {
			l = i
			break
		}
	}
	if l < 0 {
		m.L.RaiseError("invalid pattern capture")
	}
	m.cap[l].len = s - m.cap[l].init
	r := m.match(s, p)
	if r == -1 {
		m.cap[l].len = capUnfinished
	}
	return r
}

func (m *matcher) matchCapture(s int, c byte) int {
	l := int(c) - '1'
	if l < 0 || l >= m.level || m.cap[l].len == capUnfinished {
		m.L.RaiseError("invalid capture index")
	}
	n := m.cap[l].len
	if n < 0 { // a position capture matches nothing (as in C, where its length is huge)
		return -1
	}
	if len(m.src)-s >= n && m.src[s:s+n] == m.src[m.cap[l].init:m.cap[l].init+n] {
		return s + n
	}
	return -1
}

func (m *matcher) matchBalance(s, p int) int {
	if p+1 >= len(m.pat) {
		m.L.RaiseError("unbalanced pattern")
	}
	if s >= len(m.src) || m.src[s] != m.pat[p] {
		return -1
	}
	b, e := m.pat[p], m.pat[p+1]
	cont := 1
	for s++; s < len(m.src); s++ {
		m.tick()
		switch m.src[s] {
		case e:
			cont--
			if cont == 0 {
				return s + 1
			}
		case b:
			cont++
		}
	}
	return -1
}

// classEnd returns the index just past the single-character class at pat[p].
func (m *matcher) classEnd(p int) int {
	pat := m.pat
	c := pat[p]
	p++
	switch c {
	case '%':
		if p >= len(pat) {
			m.L.RaiseError("%s", "malformed pattern (ends with '%')")
		}
		return p + 1
	case '[':
		if p < len(pat) && pat[p] == '^' {
			p++
		}
		for { // look for the closing ']'; the first character may be ']' itself
			if p >= len(pat) {
				m.L.RaiseError("malformed pattern (missing ']')")
			}
			cc := pat[p]
			p++
			if cc == '%' && p < len(pat) {
				p++
			}
			if p < len(pat) && pat[p] == ']' {
				return p + 1
			}
		}
	}
	return p
}

func (m *matcher) singleMatch(c byte, p, ep int) bool {
	switch m.pat[p] {
	case '.':
		return true
	case '%':
		return matchClass(c, m.pat[p+1])
	case '[':
		return m.matchBracketClass(c, p, ep-1)
	default:
		return m.pat[p] == c
	}
}

// matchBracketClass matches c against the set pat[p:ec+1], p at '[' and ec at ']'.
func (m *matcher) matchBracketClass(c byte, p, ec int) bool {
	pat := m.pat
	sig := true
	if pat[p+1] == '^' {
		sig = false
		p++
	}
	for p++; p < ec; p++ {
		switch {
		case pat[p] == '%':
			p++
			if matchClass(c, pat[p]) {
				return sig
			}
		case pat[p+1] == '-' && p+2 < ec:
			p += 2
			if pat[p-2] <= c && c <= pat[p] {
				return sig
			}
		case pat[p] == c:
			return sig
		}
	}
	return !sig
}

// matchClass implements %a, %d, ... in the C locale, upper case meaning the complement.
func matchClass(c, cl byte) bool {
	var res bool
	switch cl | 0x20 {
	case 'a':
		res = isAlpha(c)
	case 'c':
		res = c < 32 || c == 127
	case 'd':
		res = isDigit(c)
	case 'l':
		res = 'a' <= c && c <= 'z'
	case 'p':
		res = isPunct(c)
	case 's':
		res = c == ' ' || ('\t' <= c && c <= '\r')
	case 'u':
		res = 'A' <= c && c <= 'Z'
	case 'w':
		res = isAlpha(c) || isDigit(c)
	case 'x':
		res = isDigit(c) || ('a' <= c|0x20 && c|0x20 <= 'f')
	case 'z':
		res = c == 0
	default:
		return cl == c
	}
	if 'a' <= cl && cl <= 'z' {
		return res
	}
	return !res
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlpha(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }
func isPunct(c byte) bool { return c > 32 && c < 127 && !isAlpha(c) && !isDigit(c) }

// captureValue returns capture i of the match src[s:e] (i = 0 with no captures is the whole
// match), as a Lua value.
func (m *matcher) captureValue(i, s, e int) lua.LValue {
	if i >= m.level {
		if i != 0 {
			m.L.RaiseError("invalid capture index")
		}
		return lua.LString(m.src[s:e])
	}
	c := m.cap[i]
	switch c.len {
	case capUnfinished:
		m.L.RaiseError("unfinished capture")
	case capPosition:
		return lua.LNumber(c.init + 1)
	}
	return lua.LString(m.src[c.init : c.init+c.len])
}

// pushCaptures pushes the captures of the match src[s:e], or the whole match when the pattern
// has none and wholeIfNone is set, and returns how many it pushed.
func (m *matcher) pushCaptures(L *lua.LState, s, e int, wholeIfNone bool) int {
	n := m.level
	if n == 0 && wholeIfNone {
		n = 1
	}
	for i := 0; i < n; i++ {
		L.Push(m.captureValue(i, s, e))
	}
	return n
}
