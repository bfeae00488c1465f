package luart

import (
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// toNumber is the sandbox's tonumber(e [, base]), as Lua 5.1 has it: gopher-lua's reads a
// number with an exponent ("1e3", "5e-07") as nil, which a script parsing a tool's output
// takes for "not a number" in silence. Without base, a number is itself and a string is read
// as a decimal number (sign, digits, a fraction, an exponent) or a hexadecimal integer
// ("0x1F"), with spaces around it; anything else is nil. With base (2 to 36), the string, or
// the number written as one, is read as an integer in that base ("ff", 16), else nil.
func toNumber(L *lua.LState) int {
	v := L.CheckAny(1)
	if b := L.Get(2); b != lua.LNil {
		base := L.CheckInt(2)
		if base < 2 || base > 36 {
			L.RaiseError("bad argument #2 to 'tonumber' (base out of range)")
		}
		s, ok := v.(lua.LString)
		if n, isNum := v.(lua.LNumber); isNum {
			s, ok = lua.LString(n.String()), true
		}
		if !ok {
			L.Push(lua.LNil)
			return 1
		}
		L.Push(integerIn(strings.TrimSpace(string(s)), base))
		return 1
	}
	switch v := v.(type) {
	case lua.LNumber:
		L.Push(v)
	case lua.LString:
		L.Push(decimalOrHex(strings.TrimSpace(string(v))))
	default:
		L.Push(lua.LNil)
	}
	return 1
}

// integerIn reads s, an optional sign and digits of base, as a number; nil when it is not one.
func integerIn(s string, base int) lua.LValue {
	neg := strings.HasPrefix(s, "-")
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if digits == "" || strings.ContainsAny(digits, "+-_") {
		return lua.LNil
	}
	n, err := strconv.ParseUint(digits, base, 64)
	if err != nil {
		return lua.LNil
	}
	if neg {
		return lua.LNumber(-float64(n))
	}
	return lua.LNumber(float64(n))
}

// decimalOrHex reads s as Lua 5.1 reads a numeric string: a decimal number with an optional
// sign, fraction and exponent, or 0x and hexadecimal digits; nil when it is neither.
func decimalOrHex(s string) lua.LValue {
	unsigned := strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	if rest, ok := strings.CutPrefix(strings.ToLower(unsigned), "0x"); ok {
		v := integerIn(rest, 16)
		if n, isNum := v.(lua.LNumber); isNum && strings.HasPrefix(s, "-") {
			return -n
		}
		return v
	}
	if !decimalSyntax(unsigned) {
		return lua.LNil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return lua.LNil // out of range
	}
	return lua.LNumber(f)
}

// decimalSyntax reports whether s is digits with an optional fraction and exponent, at least
// one digit before the exponent: what strconv.ParseFloat would take beyond it ("inf", "nan",
// "1_000", hexadecimal floats) is not a Lua numeral.
func decimalSyntax(s string) bool {
	i, digits := 0, 0
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		digits++
	}
	if i < len(s) && s[i] == '.' {
		for i++; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
			digits++
		}
	}
	if digits == 0 {
		return false
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		exp := 0
		for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
			exp++
		}
		if exp == 0 {
			return false
		}
	}
	return i == len(s)
}
