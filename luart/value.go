package luart

import (
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"sync"

	lua "github.com/yuin/gopher-lua"
)

// MaxDepth is how deeply tables (and JSON values) may nest in ToGo, EncodeJSON and DecodeJSON.
const MaxDepth = 200

// nullValue marks the Null userdata.
type nullValue struct{}

// Null is the json.null sentinel: the Lua value that stands for JSON null where Lua's nil
// cannot (inside arrays). It is one userdata shared by every state, so it compares equal
// everywhere. Its metatable is protected (getmetatable returns "json.null", setmetatable
// fails), so no script can change it; tostring(Null) is "null".
var Null lua.LValue = newNull()

func newNull() *lua.LUserData {
	mt := &lua.LTable{}
	mt.RawSetString("__metatable", lua.LString("json.null"))
	mt.RawSetString("__tostring", &lua.LFunction{IsG: true, Env: &lua.LTable{}, GFunction: func(L *lua.LState) int {
		L.Push(lua.LString("null"))
		return 1
	}})
	return &lua.LUserData{Value: nullValue{}, Metatable: mt}
}

// NullFor returns the json.null sentinel for L (Null: the sentinel is shared).
func NullFor(L *lua.LState) lua.LValue { return Null }

// IsNull reports whether v is the json.null sentinel.
func IsNull(v lua.LValue) bool {
	ud, ok := v.(*lua.LUserData)
	if !ok {
		return false
	}
	_, ok = ud.Value.(nullValue)
	return ok
}

// The JSON type marker: a metatable field that says whether a table is an object or an array,
// which its keys cannot say when it is empty. DecodeJSON and FromGo mark empty objects;
// scripts can mark a table with setmetatable(t, {__jsontype = "object"}) (or "array").
const jsonTypeField = "__jsontype"

// MarkObject makes t convert to a JSON object even when it is empty, and returns it.
func MarkObject(L *lua.LState, t *lua.LTable) *lua.LTable { return mark(L, t, "object") }

// MarkArray makes t convert to a JSON array (it is the default for an empty table), and
// returns it.
func MarkArray(L *lua.LState, t *lua.LTable) *lua.LTable { return mark(L, t, "array") }

func mark(L *lua.LState, t *lua.LTable, kind string) *lua.LTable {
	mt := L.CreateTable(0, 1)
	mt.RawSetString(jsonTypeField, lua.LString(kind))
	t.Metatable = mt
	return t
}

func jsonType(t *lua.LTable) string {
	if mt, ok := t.Metatable.(*lua.LTable); ok {
		if s, ok := mt.RawGetString(jsonTypeField).(lua.LString); ok {
			return string(s)
		}
	}
	return ""
}

// ValueError is an error converting a value, naming where in it: "outputs.x[2].y".
type ValueError struct {
	Path string
	Msg  string
}

func (e *ValueError) Error() string { return e.Path + ": " + e.Msg }

var identRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })

func pathKey(path, key string) string {
	if identRE().MatchString(key) {
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

func pathIndex(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

// ToGo converts a Lua value to plain Go data: nil, bool, float64, string, []any and
// map[string]any. Errors name the place in the value, rooted at "value"; see ToGoNamed.
//
// Numbers are float64 (an integer stays integral: a float64 with no fraction); NaN and ±Inf
// are refused. json.null (Null) becomes nil. A table becomes:
//   - a map[string]any when its keys are strings (or when it is marked as an object, and then
//     number keys are written in decimal);
//   - a []any when its keys are positive integers: its length is the largest key and the holes
//     are nil, provided there are no more holes than values or at most 16 holes; a sparser table
//     is an error (so {1, nil, 3} is [1, null, 3] and {[1e9] = 1} is refused);
//   - an empty []any when it is empty, unless marked as an object.
//
// A table with both string and integer keys, other kinds of keys, functions, userdata,
// threads, a table that contains itself and nesting deeper than MaxDepth are errors. A table
// reached twice without a cycle ({a, a}) is fine. Metamethods are not called.
func ToGo(v lua.LValue) (any, error) { return ToGoNamed("value", v) }

// ToGoNamed is ToGo with errors rooted at name ("outputs.x.y: cannot encode function").
func ToGoNamed(name string, v lua.LValue) (any, error) {
	c := toGoConv{onPath: make(map[*lua.LTable]bool)}
	return c.value(v, name, 0)
}

type toGoConv struct {
	onPath map[*lua.LTable]bool
}

func (c *toGoConv) value(v lua.LValue, path string, depth int) (any, error) {
	switch v := v.(type) {
	case *lua.LNilType:
		return nil, nil
	case lua.LBool:
		return bool(v), nil
	case lua.LNumber:
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, &ValueError{path, fmt.Sprintf("cannot encode %v", v)}
		}
		return f, nil
	case lua.LString:
		return string(v), nil
	case *lua.LTable:
		return c.table(v, path, depth+1)
	case *lua.LUserData:
		if IsNull(v) {
			return nil, nil
		}
		return nil, &ValueError{path, "cannot encode userdata"}
	default:
		return nil, &ValueError{path, "cannot encode " + v.Type().String()}
	}
}

func (c *toGoConv) table(t *lua.LTable, path string, depth int) (any, error) {
	if c.onPath[t] {
		return nil, &ValueError{path, "cannot encode a table that contains itself"}
	}
	if depth > MaxDepth {
		return nil, &ValueError{path, fmt.Sprintf("nested more than %d levels deep", MaxDepth)}
	}
	c.onPath[t] = true
	defer delete(c.onPath, t)

	kind := jsonType(t)
	var nStr, nInt int
	var maxIdx int64
	var badKey lua.LValue
	t.ForEach(func(k, _ lua.LValue) {
		switch k := k.(type) {
		case lua.LString:
			nStr++
		case lua.LNumber:
			f := float64(k)
			if f >= 1 && f == math.Trunc(f) && f <= 1<<53 {
				nInt++
				maxIdx = max(maxIdx, int64(f))
			} else if kind == "object" && !math.IsNaN(f) && !math.IsInf(f, 0) {
				nStr++
			} else if badKey == nil {
				badKey = k
			}
		default:
			if badKey == nil {
				badKey = k
			}
		}
	})
	if badKey != nil {
		return nil, &ValueError{path, fmt.Sprintf("cannot encode a table key of type %s (%s): keys must be strings or positive integers", badKey.Type(), badKey)}
	}
	switch {
	case kind == "object":
		m := make(map[string]any, nStr+nInt)
		var err error
		t.ForEach(func(k, v lua.LValue) {
			if err != nil {
				return
			}
			key := lua.LVAsString(k)
			m[key], err = c.value(v, pathKey(path, key), depth)
		})
		return m, err
	case nStr > 0 && nInt > 0:
		return nil, &ValueError{path, "cannot encode a table with both string keys and integer keys"}
	case kind == "array" && nStr > 0:
		return nil, &ValueError{path, "cannot encode a table marked as an array that has string keys"}
	case nStr > 0:
		m := make(map[string]any, nStr)
		var err error
		t.ForEach(func(k, v lua.LValue) {
			if err != nil {
				return
			}
			key := string(k.(lua.LString))
			m[key], err = c.value(v, pathKey(path, key), depth)
		})
		return m, err
	}
	if holes := maxIdx - int64(nInt); holes > int64(nInt) && holes > 16 {
		return nil, &ValueError{path, fmt.Sprintf("cannot encode a sparse array: %d values up to index %d", nInt, maxIdx)}
	}
	a := make([]any, maxIdx)
	for i := range a {
		var err error
		if a[i], err = c.value(t.RawGetInt(i+1), pathIndex(path, i+1), depth); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// FromGo converts Go data to a Lua value: nil, bool, numbers, string, []byte (as a string),
// json.Number, slices and arrays, maps with string keys, and lua.LValue as is. Other values
// (structs, pointers) go through encoding/json first; a value it cannot encode becomes nil.
//
// nil is Lua nil at the top and as a map value (the key is left out: Lua tables cannot hold
// nil), and Null inside slices, so positions are kept. Empty maps are marked as objects (see
// MarkObject) so they convert back to {}. Integers beyond 2^53 lose precision (Lua numbers are
// float64). Values nested deeper than MaxDepth become nil.
func FromGo(L *lua.LState, v any) lua.LValue { return fromGo(L, v, 0) }

func fromGo(L *lua.LState, v any, depth int) lua.LValue {
	if depth > MaxDepth {
		return lua.LNil
	}
	switch v := v.(type) {
	case nil:
		return lua.LNil
	case lua.LValue:
		return v
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case []byte:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case float32:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case int8:
		return lua.LNumber(v)
	case int16:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case uint:
		return lua.LNumber(v)
	case uint8:
		return lua.LNumber(v)
	case uint16:
		return lua.LNumber(v)
	case uint32:
		return lua.LNumber(v)
	case uint64:
		return lua.LNumber(v)
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return lua.LNil
		}
		return lua.LNumber(f)
	case []any:
		t := L.CreateTable(len(v), 0)
		for i, e := range v {
			t.RawSetInt(i+1, elemFromGo(L, e, depth+1))
		}
		return t
	case map[string]any:
		t := L.CreateTable(0, len(v))
		for k, e := range v {
			if e != nil {
				t.RawSetString(k, fromGo(L, e, depth+1))
			}
		}
		if len(v) == 0 {
			MarkObject(L, t)
		}
		return t
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return lua.LNil
		}
		t := L.CreateTable(rv.Len(), 0)
		for i := 0; i < rv.Len(); i++ {
			t.RawSetInt(i+1, elemFromGo(L, rv.Index(i).Interface(), depth+1))
		}
		return t
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		if rv.IsNil() {
			return lua.LNil
		}
		t := L.CreateTable(0, rv.Len())
		keys := rv.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		for _, k := range keys {
			e := rv.MapIndex(k).Interface()
			if lv := fromGo(L, e, depth+1); lv != lua.LNil {
				t.RawSetString(k.String(), lv)
			}
		}
		if rv.Len() == 0 {
			MarkObject(L, t)
		}
		return t
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			return lua.LNil
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		return lua.LNil
	}
	lv, err := DecodeJSON(L, data)
	if err != nil {
		return lua.LNil
	}
	return lv
}

// elemFromGo converts an element of a slice: nil becomes Null.
func elemFromGo(L *lua.LState, v any, depth int) lua.LValue {
	lv := fromGo(L, v, depth)
	if lv == lua.LNil {
		return Null
	}
	return lv
}
