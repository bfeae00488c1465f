package luart

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"
)

// luaValue runs code in a bare state with `null` bound to Null and returns its result.
func luaValue(t *testing.T, code string) lua.LValue {
	t.Helper()
	s := newState(t, New(Options{}), StateOptions{})
	s.L().SetGlobal("null", Null)
	res, err := s.DoChunk("value.lua", code)
	if err != nil {
		t.Fatalf("%s: %v", code, err)
	}
	if len(res) == 0 {
		return lua.LNil
	}
	return res[0]
}

func TestToGo(t *testing.T) {
	t.Parallel()
	tests := []struct {
		code, want, wantErr string
	}{
		{code: "return nil", want: "null"},
		{code: "return true", want: "true"},
		{code: "return 3", want: "3"},
		{code: "return -3.5", want: "-3.5"},
		{code: "return 2^53", want: "9007199254740992"},
		{code: "return 0.1", want: "0.1"},
		{code: "return 'héllo ✓ <&>'", want: `"héllo ✓ <&>"`},
		{code: "return null", want: "null"},
		{code: "return {}", want: "[]"},
		{code: "return {1, 2, 3}", want: "[1,2,3]"},
		{code: "return {1, nil, 3}", want: "[1,null,3]"},
		{code: "return {nil, nil, 3}", want: "[null,null,3]"},
		{code: "return {[1] = 'a', [3] = 'c'}", want: `["a",null,"c"]`},
		{code: "return {[17] = 1}", want: "[" + strings.Repeat("null,", 16) + "1]"},
		{code: "return {1, null, 3}", want: "[1,null,3]"},
		{code: "return {a = 1, b = {c = {d = 'x'}}}", want: `{"a":1,"b":{"c":{"d":"x"}}}`},
		{code: "return {b = 1, a = 2, ['1'] = 3, ['é'] = 4}", want: `{"1":3,"a":2,"b":1,"é":4}`},
		{code: "return {a = null}", want: `{"a":null}`},
		{code: "local a = {1} return {a, a, {x = a}}", want: `[[1],[1],{"x":[1]}]`},
		{code: "return setmetatable({}, {__jsontype = 'object'})", want: "{}"},
		{code: "return setmetatable({[1] = 'a', [2.5] = 'b'}, {__jsontype = 'object'})", want: `{"1":"a","2.5":"b"}`},
		{code: "return setmetatable({}, {__jsontype = 'array'})", want: "[]"},
		{code: "local t = {} for i = 1, 199 do t = {t} end return t", want: strings.Repeat("[", 200) + strings.Repeat("]", 200)},
		{code: "return setmetatable({}, {__index = function() error('no metamethods') end})", want: "[]"},

		{code: "return {[20] = 1}", wantErr: "value: cannot encode a sparse array: 1 values up to index 20"},
		{code: "return {[2^40] = 1}", wantErr: "value: cannot encode a sparse array"},
		{code: "return {1, 2, x = 3}", wantErr: "value: cannot encode a table with both string keys and integer keys"},
		{code: "return {[true] = 1}", wantErr: "value: cannot encode a table key of type boolean"},
		{code: "return {[1.5] = 1}", wantErr: "value: cannot encode a table key of type number (1.5)"},
		{code: "return {[0] = 1}", wantErr: "value: cannot encode a table key of type number (0)"},
		{code: "return {[-1] = 1}", wantErr: "value: cannot encode a table key of type number (-1)"},
		{code: "return {f = print}", wantErr: "value.f: cannot encode function"},
		{code: "return {a = {b = {c = function() end}}}", wantErr: "value.a.b.c: cannot encode function"},
		{code: "return {{}, {x = {1, 2, print}}}", wantErr: "value[2].x[3]: cannot encode function"},
		{code: "return {['a b'] = print}", wantErr: `value["a b"]: cannot encode function`},
		{code: "local t = {} t.self = t return t", wantErr: "value.self: cannot encode a table that contains itself"},
		{code: "local t = {} t[1] = {t} return t", wantErr: "value[1][1]: cannot encode a table that contains itself"},
		{code: "return coroutine.create(function() end)", wantErr: "value: cannot encode thread"},
		{code: "return {x = 0/0}", wantErr: "value.x: cannot encode NaN"},
		{code: "return {1/0}", wantErr: "value[1]: cannot encode +Inf"},
		{code: "return setmetatable({a = 1}, {__jsontype = 'array'})", wantErr: "value: cannot encode a table marked as an array that has string keys"},
		{code: "local t = {} for i = 1, 250 do t = {t} end return t", wantErr: "nested more than 200 levels deep"},
	}
	for _, tt := range tests {
		t.Run(tt.code, func(t *testing.T) {
			v := luaValue(t, tt.code)
			got, err := ToGo(v)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ToGo = %v, %v, want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ToGo: %v", err)
			}
			b, err := EncodeJSON(got)
			if err != nil {
				t.Fatalf("EncodeJSON: %v", err)
			}
			if string(b) != tt.want {
				t.Errorf("ToGo then EncodeJSON = %s, want %s", b, tt.want)
			}
		})
	}
}

func TestToGoNamed(t *testing.T) {
	t.Parallel()
	v := luaValue(t, "return {x = {y = print}}")
	_, err := ToGoNamed("outputs", v)
	if got, want := err.Error(), "outputs.x.y: cannot encode function"; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

func TestFromGo(t *testing.T) {
	t.Parallel()
	type point struct {
		X int    `json:"x"`
		Y string `json:"y,omitempty"`
	}
	tests := []struct {
		name string
		in   any
		want string
	}{
		{"nil", nil, "null"},
		{"map with nil value", map[string]any{"a": nil, "b": 1}, `{"b":1}`},
		{"slice with nil", []any{1, nil, "x"}, `[1,null,"x"]`},
		{"empty map", map[string]any{}, "{}"},
		{"empty slice", []any{}, "[]"},
		{"strings", []string{"a", "b"}, `["a","b"]`},
		{"string map", map[string]string{"k": "v"}, `{"k":"v"}`},
		{"ints", []int{1, -2, 3}, "[1,-2,3]"},
		{"int64", int64(1) << 53, "9007199254740992"},
		{"uint8", uint8(7), "7"},
		{"float32", float32(0.5), "0.5"},
		{"json.Number", json.Number("12.5"), "12.5"},
		{"bytes", []byte("raw"), `"raw"`},
		{"struct", point{X: 1}, `{"x":1}`},
		{"pointer", &point{X: 2, Y: "y"}, `{"x":2,"y":"y"}`},
		{"nested", map[string]any{"a": []any{map[string]any{"b": []any{nil}}}}, `{"a":[{"b":[null]}]}`},
		{"empty nested map", map[string]any{"a": map[string]string{}}, `{"a":{}}`},
		{"unicode", "日本 ✓ \u2028", `"日本 ✓ \u2028"`},
		{"lua value", lua.LString("as is"), `"as is"`},
		{"int map", map[int]string{2: "b", 1: "a"}, `{"1":"a","2":"b"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			L := lua.NewState(lua.Options{SkipOpenLibs: true})
			defer L.Close()
			lv := FromGo(L, tt.in)
			g, err := ToGo(lv)
			if err != nil {
				t.Fatalf("ToGo(FromGo(%#v)): %v", tt.in, err)
			}
			b, err := EncodeJSON(g)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != tt.want {
				t.Errorf("FromGo(%#v) = %s, want %s", tt.in, b, tt.want)
			}
		})
	}
	t.Run("null in arrays is the sentinel", func(t *testing.T) {
		s := newState(t, New(Options{}), StateOptions{})
		s.L().SetGlobal("v", FromGo(s.L(), []any{1, nil, 3}))
		s.L().SetGlobal("null", NullFor(s.L()))
		res, err := s.DoChunk("null.lua", "return #v, v[2] == null, tostring(v[2]), type(v[2]), getmetatable(v[2]), pcall(setmetatable, v[2], {})")
		if err != nil {
			t.Fatal(err)
		}
		got := make([]string, len(res))
		for i, r := range res {
			got[i] = r.String()
		}
		want := []string{"3", "true", "null", "userdata", "json.null", "false"}
		for i, w := range want {
			if got[i] != w {
				t.Errorf("result %d = %q, want %q", i+1, got[i], w)
			}
		}
		if len(got) < 7 || !strings.Contains(got[6], "protected metatable") {
			t.Errorf("setmetatable(null) error = %v, want a protected metatable error", got)
		}
	})
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	values := []any{
		nil, true, false, 0.0, 42.0, -1.5, 1e300, 9007199254740993.0, "", "héllo ✓ 日本 \x00 \n",
		[]any{}, map[string]any{}, []any{1.0, nil, 3.0}, []any{nil, nil},
		map[string]any{"a": []any{map[string]any{"b": map[string]any{}}}, "c": "d"},
		map[string]any{"nested": map[string]any{"deeper": []any{[]any{}, []any{nil, "x"}}}},
	}
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, v := range values {
		want, err := EncodeJSON(v)
		if err != nil {
			t.Fatalf("EncodeJSON(%#v): %v", v, err)
		}
		g, err := ToGo(FromGo(L, v))
		if err != nil {
			t.Fatalf("ToGo(FromGo(%#v)): %v", v, err)
		}
		got, _ := EncodeJSON(g)
		if !bytes.Equal(got, want) {
			t.Errorf("Go round trip of %s = %s", want, got)
		}
		lv, err := DecodeJSON(L, want)
		if err != nil {
			t.Fatalf("DecodeJSON(%s): %v", want, err)
		}
		g, err = ToGo(lv)
		if err != nil {
			t.Fatalf("ToGo(DecodeJSON(%s)): %v", want, err)
		}
		got, _ = EncodeJSON(g)
		if !bytes.Equal(got, want) {
			t.Errorf("JSON round trip of %s = %s", want, got)
		}
	}
}

func TestEncodeJSON(t *testing.T) {
	t.Parallel()
	var nilMap map[string]any
	var nilSlice []string
	tests := []struct {
		name    string
		in      any
		want    string
		wantErr string
	}{
		{name: "sorted keys", in: map[string]any{"b": 1.0, "a": map[string]any{"d": 2.0, "c": 3.0}, "B": nil}, want: `{"B":null,"a":{"c":3,"d":2},"b":1}`},
		{name: "no HTML escaping", in: "<a href=\"x\">&</a>", want: `"<a href=\"x\">&</a>"`},
		{name: "escapes", in: "\n\t\r\b\f\\\"\x01\x1f\u2028\u2029", want: `"\n\t\r\b\f\\\"\u0001\u001f\u2028\u2029"`},
		{name: "unicode", in: "é😀", want: `"é😀"`},
		{name: "integral float", in: 1.0, want: "1"},
		{name: "big integral float", in: 1e20, want: "100000000000000000000"},
		{name: "huge float", in: 1e21, want: "1e+21"},
		{name: "fraction", in: 0.1, want: "0.1"},
		{name: "small", in: 1e-7, want: "1e-7"},
		{name: "negative zero", in: math.Copysign(0, -1), want: "0"},
		{name: "negative", in: -123456789012.0, want: "-123456789012"},
		{name: "int64", in: int64(-5), want: "-5"},
		{name: "uint64", in: uint64(math.MaxUint64), want: "18446744073709551615"},
		{name: "json.Number", in: json.Number("1.50"), want: "1.5"},
		{name: "nil map", in: nilMap, want: "null"},
		{name: "nil slice", in: nilSlice, want: "null"},
		{name: "string slice", in: []string{"b", "a"}, want: `["b","a"]`},
		{name: "struct", in: struct {
			B int `json:"b"`
			A int `json:"a"`
		}{1, 2}, want: `{"a":2,"b":1}`},
		{name: "lua table", in: luaTable(), want: `{"k":[1,null]}`},
		{name: "NaN", in: math.NaN(), wantErr: "value: cannot encode NaN"},
		{name: "Inf in map", in: map[string]any{"x": []any{math.Inf(1)}}, wantErr: "value.x[1]: cannot encode +Inf"},
		{name: "invalid UTF-8", in: []any{"ok", "\xff"}, wantErr: "value[2]: cannot encode a string that is not valid UTF-8"},
		{name: "invalid UTF-8 key", in: map[string]any{"\xff": 1}, wantErr: "not valid UTF-8"},
		{name: "too deep", in: deepSlice(201), wantErr: "nested more than 200 levels deep"},
		{name: "unsupported", in: make(chan int), wantErr: "value: json: unsupported type"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := EncodeJSON(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("EncodeJSON = %s, %v, want error %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("EncodeJSON = %s, want %s", got, tt.want)
			}
			if !json.Valid(got) {
				t.Errorf("EncodeJSON = %s: not valid JSON", got)
			}
		})
	}
	if _, err := EncodeJSON(deepSlice(200)); err != nil {
		t.Errorf("EncodeJSON(200 levels): %v", err)
	}
}

func luaTable() lua.LValue {
	t := &lua.LTable{}
	a := &lua.LTable{}
	a.RawSetInt(1, lua.LNumber(1))
	a.RawSetInt(2, Null)
	t.RawSetString("k", a)
	return t
}

func deepSlice(n int) any {
	var v any = []any{}
	for i := 1; i < n; i++ {
		v = []any{v}
	}
	return v
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want, wantErr string
		exact                   bool // DecodeJSONExact, json.decode's
	}{
		{name: "null in array", in: `[1,null,3]`, want: `[1,null,3]`},
		{name: "null member dropped", in: `{"a":null,"b":1}`, want: `{"b":1}`},
		{name: "only null members", in: `{"a":null}`, want: `{}`},
		{name: "empty object", in: `{}`, want: `{}`},
		{name: "empty array", in: ` [ ] `, want: `[]`},
		{name: "top-level null", in: `null`, want: `null`},
		{name: "string", in: `"x"`, want: `"x"`},
		{name: "unicode escapes", in: `"\u00e9\ud83d\ude00"`, want: `"é😀"`},
		{name: "invalid UTF-8 replaced", in: "\"\xff\"", want: `"` + "\ufffd" + `"`},
		{name: "numbers", in: `[1.0, -0, 1e2, 1.2345678901234567890e19, 0.5e-3]`, want: `[1,0,100,12345678901234567000,0.0005]`},
		{name: "integers exact in a float", in: `[9007199254740992, -9007199254740992, 18014398509481984, 1152921504606846976]`, exact: true,
			want: `[9007199254740992,-9007199254740992,18014398509481984,1152921504606847000]`},
		{name: "a big float as apollo writes it", in: `[1234567890123456800]`, exact: true, want: `[1234567890123456800]`},
		{name: "integer past 2^53, rounded", in: `{"id":9007199254740993}`, want: `{"id":9007199254740992}`},
		{name: "integer past 2^53, exact", in: `{"id":9007199254740993}`, exact: true,
			wantErr: "json: value.id: integer 9007199254740993 is not exact in a Lua number"},
		{name: "integer past 2^63, exact", in: `[1,{"a":[12345678901234567890]}]`, exact: true,
			wantErr: "json: value[2].a[1]: integer 12345678901234567890 is not exact"},
		{name: "duplicate keys", in: `{"a":1,"a":2}`, want: `{"a":2}`},
		{name: "sorted on output", in: `{"z":1,"a":{"y":[],"b":{}}}`, want: `{"a":{"b":{},"y":[]},"z":1}`},
		{name: "200 levels", in: strings.Repeat("[", 200) + strings.Repeat("]", 200), want: strings.Repeat("[", 200) + strings.Repeat("]", 200)},

		{name: "201 levels", in: strings.Repeat("[", 201) + strings.Repeat("]", 201), wantErr: "nested more than 200 levels deep"},
		{name: "out of range", in: `1e400`, wantErr: "out of range"},
		{name: "trailing data", in: `[1] [2]`, wantErr: "unexpected data after the top-level value"},
		{name: "trailing garbage", in: `{} x`, wantErr: "invalid character"},
		{name: "trailing comma", in: `{"a":1,}`, wantErr: "json:"},
		{name: "empty", in: ``, wantErr: "unexpected EOF"},
		{name: "truncated", in: `[1,`, wantErr: "json:"},
		{name: "bare word", in: `nul`, wantErr: "json:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			L := lua.NewState(lua.Options{SkipOpenLibs: true})
			defer L.Close()
			decode := DecodeJSON
			if tt.exact {
				decode = DecodeJSONExact
			}
			lv, err := decode(L, []byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("DecodeJSON(%q) = %v, %v, want error %q", tt.in, lv, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeJSON(%q): %v", tt.in, err)
			}
			g, err := ToGo(lv)
			if err != nil {
				t.Fatal(err)
			}
			got, err := EncodeJSON(g)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Errorf("DecodeJSON(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
	t.Run("size cap", func(t *testing.T) {
		L := lua.NewState(lua.Options{SkipOpenLibs: true})
		defer L.Close()
		big := bytes.Repeat([]byte(" "), MaxJSONBytes+1)
		big[0] = '1'
		if _, err := DecodeJSON(L, big); err == nil || !strings.Contains(err.Error(), "larger than 64 MiB") {
			t.Errorf("DecodeJSON(64 MiB + 1) error = %v, want the size cap", err)
		}
	})
	t.Run("lua view", func(t *testing.T) {
		s := newState(t, New(Options{}), StateOptions{})
		v, err := DecodeJSON(s.L(), []byte(`{"list":[1,null,{"k":"v"}],"gone":null}`))
		if err != nil {
			t.Fatal(err)
		}
		s.L().SetGlobal("doc", v)
		s.L().SetGlobal("null", Null)
		res, err := s.DoChunk("view.lua", "return #doc.list, doc.list[2] == null, doc.list[3].k, doc.gone == nil")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range res {
			got = append(got, r.String())
		}
		if want := "3 true v true"; strings.Join(got, " ") != want {
			t.Errorf("Lua view = %v, want %s", got, want)
		}
	})
}

// FuzzJSON: decoding any input never panics, and what decodes converts back to canonical JSON
// that is a fixed point (decode, convert and encode again give the same bytes).
func FuzzJSON(f *testing.F) {
	for _, seed := range []string{`[1,null,3]`, `{"a":{"b":[]},"c":"é"}`, `{}`, `null`, `1e400`, `"\ud800"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		L := lua.NewState(lua.Options{SkipOpenLibs: true})
		defer L.Close()
		lv, err := DecodeJSON(L, data)
		if err != nil {
			return
		}
		g, err := ToGo(lv)
		if err != nil {
			t.Fatalf("ToGo(DecodeJSON(%q)): %v", data, err)
		}
		first, err := EncodeJSON(g)
		if err != nil {
			t.Fatalf("EncodeJSON of decoded %q: %v", data, err)
		}
		if !json.Valid(first) {
			t.Fatalf("EncodeJSON gave invalid JSON %q", first)
		}
		lv2, err := DecodeJSON(L, first)
		if err != nil {
			t.Fatalf("DecodeJSON(%q) of our own output: %v", first, err)
		}
		g2, err := ToGo(lv2)
		if err != nil {
			t.Fatal(err)
		}
		second, err := EncodeJSON(g2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("not a fixed point: %s then %s", first, second)
		}
		// And through FromGo.
		third, err := EncodeJSON(mustToGo(t, FromGo(L, g)))
		if err != nil || !bytes.Equal(first, third) {
			t.Fatalf("FromGo round trip: %s, %v, want %s", third, err, first)
		}
	})
}

func mustToGo(t *testing.T, v lua.LValue) any {
	t.Helper()
	g, err := ToGo(v)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestNullShared: the shared Null sentinel is used by many states at once without races.
func TestNullShared(t *testing.T) {
	t.Parallel()
	rt := New(Options{})
	done := make(chan error, 4)
	for range 4 {
		s := newState(t, rt, StateOptions{})
		s.L().SetGlobal("null", NullFor(s.L()))
		s.L().SetGlobal("list", FromGo(s.L(), []any{nil}))
		go func() {
			_, err := s.DoChunk("null.lua", `
				for i = 1, 2000 do
					assert(tostring(null) == "null" and list[1] == null and type(null) == "userdata")
					assert(not pcall(setmetatable, null, {}))
					assert(getmetatable(null) == "json.null")
				end`)
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
