package stdlib

import (
	lua "github.com/yuin/gopher-lua"

	"apollo/luart"
)

func (lib *library) jsonLoader(L *lua.LState) int {
	t := L.CreateTable(0, 3)
	L.SetFuncs(t, map[string]lua.LGFunction{
		"encode": jsonEncode,
		"decode": jsonDecode,
	})
	t.RawSetString("null", luart.NullFor(L))
	L.Push(t)
	return 1
}

func jsonEncode(L *lua.LState) int {
	const fn = "json.encode"
	if L.GetTop() < 1 {
		argError(L, fn, 1, "value expected")
	}
	v, err := luart.ToGo(L.Get(1))
	if err != nil {
		raise(L, fn, "%v", err)
	}
	b, err := luart.EncodeJSON(v)
	if err != nil {
		raise(L, fn, "%v", err)
	}
	L.Push(lua.LString(b))
	return 1
}

func jsonDecode(L *lua.LState) int {
	const fn = "json.decode"
	s := checkString(L, fn, 1, "text")
	v, err := luart.DecodeJSONExact(L, []byte(s))
	if err != nil {
		raise(L, fn, "%v", err)
	}
	if v == lua.LNil {
		v = luart.NullFor(L) // the document is null
	}
	L.Push(v)
	return 1
}
