package luart

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	lua "github.com/yuin/gopher-lua"
)

// MaxJSONBytes is the largest document DecodeJSON accepts.
const MaxJSONBytes = 64 << 20

// EncodeJSON writes v as canonical JSON, so equal values give equal bytes (for digests and
// idempotency keys): object keys sorted by their bytes, no insignificant space, no HTML
// escaping (only ", \, control characters, U+2028 and U+2029 are escaped, as encoding/json
// does), integral numbers without a fraction or exponent below 1e21 ("3", not "3.0"), other
// numbers in encoding/json's shortest form, -0 as 0. NaN, ±Inf, strings that are not valid
// UTF-8 and nesting deeper than MaxDepth are errors naming the place ("value.x[2]: ...").
//
// v is what ToGo returns (nil, bool, float64, string, []any, map[string]any); other numbers,
// slices and string-keyed maps are accepted, and anything else goes through encoding/json.
func EncodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := encodeValue(&b, v, "value", 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func encodeValue(b *bytes.Buffer, v any, path string, depth int) error {
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case float64:
		return encodeFloat(b, v, path)
	case float32:
		return encodeFloat(b, float64(v), path)
	case int:
		b.WriteString(strconv.FormatInt(int64(v), 10))
	case int8, int16, int32, int64:
		b.WriteString(strconv.FormatInt(reflect.ValueOf(v).Int(), 10))
	case uint, uint8, uint16, uint32, uint64, uintptr:
		b.WriteString(strconv.FormatUint(reflect.ValueOf(v).Uint(), 10))
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return &ValueError{path, fmt.Sprintf("invalid number %q", string(v))}
		}
		return encodeFloat(b, f, path)
	case string:
		return encodeString(b, v, path)
	case []any:
		if v == nil {
			b.WriteString("null")
			return nil
		}
		if depth >= MaxDepth {
			return &ValueError{path, fmt.Sprintf("nested more than %d levels deep", MaxDepth)}
		}
		b.WriteByte('[')
		for i, e := range v {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := encodeValue(b, e, pathIndex(path, i+1), depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
	case map[string]any:
		if v == nil {
			b.WriteString("null")
			return nil
		}
		if depth >= MaxDepth {
			return &ValueError{path, fmt.Sprintf("nested more than %d levels deep", MaxDepth)}
		}
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			kp := pathKey(path, k)
			if err := encodeString(b, k, kp); err != nil {
				return err
			}
			b.WriteByte(':')
			if err := encodeValue(b, v[k], kp, depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case lua.LValue:
		g, err := ToGoNamed(path, v)
		if err != nil {
			return err
		}
		return encodeValue(b, g, path, depth)
	default:
		return encodeOther(b, v, path, depth)
	}
	return nil
}

// encodeOther encodes slices and string-keyed maps by reflection, and anything else through
// encoding/json and back.
func encodeOther(b *bytes.Buffer, v any, path string, depth int) error {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			b.WriteString("null")
			return nil
		}
		a := make([]any, rv.Len())
		for i := range a {
			a[i] = rv.Index(i).Interface()
		}
		return encodeValue(b, a, path, depth)
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			break
		}
		if rv.IsNil() {
			b.WriteString("null")
			return nil
		}
		m := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			m[it.Key().String()] = it.Value().Interface()
		}
		return encodeValue(b, m, path, depth)
	case reflect.Pointer, reflect.Interface:
		if rv.IsNil() {
			b.WriteString("null")
			return nil
		}
	}
	data, err := json.Marshal(v)
	if err != nil {
		return &ValueError{path, err.Error()}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return &ValueError{path, err.Error()}
	}
	return encodeValue(b, g, path, depth)
}

func encodeFloat(b *bytes.Buffer, f float64, path string) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return &ValueError{path, fmt.Sprintf("cannot encode %v", f)}
	}
	b.Write(appendFloat(nil, f))
	return nil
}

func appendFloat(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // and -0
	}
	abs := math.Abs(f)
	if f == math.Trunc(f) && abs < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	// As encoding/json: an exponent outside [1e-6, 1e21), written without padding.
	fmtByte := byte('f')
	if abs < 1e-6 || abs >= 1e21 {
		fmtByte = 'e'
	}
	dst = strconv.AppendFloat(dst, f, fmtByte, -1, 64)
	if fmtByte == 'e' {
		n := len(dst)
		if n >= 4 && dst[n-4] == 'e' && dst[n-3] == '-' && dst[n-2] == '0' {
			dst[n-2] = dst[n-1]
			dst = dst[:n-1]
		}
	}
	return dst
}

const hexDigits = "0123456789abcdef"

func encodeString(b *bytes.Buffer, s, path string) error {
	if !utf8.ValidString(s) {
		return &ValueError{path, "cannot encode a string that is not valid UTF-8 (encode binary data first, e.g. as hex)"}
	}
	b.WriteByte('"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b.WriteString(s[start:i])
			switch c {
			case '"', '\\':
				b.WriteByte('\\')
				b.WriteByte(c)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				b.WriteString(`\u00`)
				b.WriteByte(hexDigits[c>>4])
				b.WriteByte(hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == '\u2028' || r == '\u2029' {
			b.WriteString(s[start:i])
			b.WriteString(`\u202`)
			b.WriteByte(hexDigits[r&0xf])
			start = i + size
		}
		i += size
	}
	b.WriteString(s[start:])
	b.WriteByte('"')
	return nil
}

// DecodeJSON decodes one JSON document into a Lua value for L. Objects become tables with
// string keys (an object member that is null is left out; an object that ends up empty is
// marked as an object, see MarkObject); arrays become tables with keys 1..n where null is
// Null, so positions are kept; numbers become Lua numbers (an integer beyond 2^53 the nearest
// float); a top-level null is nil. Documents over MaxJSONBytes, nesting deeper than MaxDepth,
// numbers out of float64 range and anything after the value are errors.
func DecodeJSON(L *lua.LState, data []byte) (lua.LValue, error) {
	return decodeJSON(L, data, false)
}

// DecodeJSONExact is DecodeJSON refusing, with its path, an integer that no Lua number holds
// and that is not how a float is written either (exactInteger): json.decode of a document
// from elsewhere, where 9007199254740993 is an ID that must not become ...992 in silence.
func DecodeJSONExact(L *lua.LState, data []byte) (lua.LValue, error) {
	return decodeJSON(L, data, true)
}

func decodeJSON(L *lua.LState, data []byte, exact bool) (lua.LValue, error) {
	if len(data) > MaxJSONBytes {
		return nil, fmt.Errorf("json: document of %d bytes is larger than %s", len(data), mib(MaxJSONBytes))
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(L, dec, "value", 0, exact)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			return nil, errors.New("json: unexpected data after the top-level value")
		}
		return nil, fmt.Errorf("json: %w", err)
	}
	if IsNull(v) {
		return lua.LNil, nil
	}
	return v, nil
}

func decodeValue(L *lua.LState, dec *json.Decoder, path string, depth int, exact bool) (lua.LValue, error) {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("json: %w", err)
	}
	switch tok := tok.(type) {
	case nil:
		return Null, nil
	case bool:
		return lua.LBool(tok), nil
	case string:
		return lua.LString(tok), nil
	case json.Number:
		f, err := strconv.ParseFloat(string(tok), 64)
		if err != nil {
			return nil, fmt.Errorf("json: %s: number %s is out of range", path, tok)
		}
		if exact && !exactInteger(string(tok), f) {
			return nil, fmt.Errorf("json: %s: integer %s is not exact in a Lua number (a float: integers are exact up to "+
				"2^53); have it sent as a string", path, tok)
		}
		return lua.LNumber(f), nil
	case json.Delim:
		if depth >= MaxDepth {
			return nil, fmt.Errorf("json: nested more than %d levels deep", MaxDepth)
		}
		t := L.NewTable()
		if tok == '[' {
			for i := 1; dec.More(); i++ {
				v, err := decodeValue(L, dec, path+"["+strconv.Itoa(i)+"]", depth+1, exact)
				if err != nil {
					return nil, err
				}
				t.RawSetInt(i, v)
			}
		} else {
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, fmt.Errorf("json: %w", err)
				}
				key, ok := kt.(string)
				if !ok {
					return nil, fmt.Errorf("json: object key is %v, not a string", kt)
				}
				v, err := decodeValue(L, dec, path+"."+key, depth+1, exact)
				if err != nil {
					return nil, err
				}
				if IsNull(v) {
					t.RawSetString(key, lua.LNil) // a later duplicate null removes an earlier value
					continue
				}
				t.RawSetString(key, v)
			}
			if k, _ := t.Next(lua.LNil); k == lua.LNil {
				MarkObject(L, t)
			}
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, fmt.Errorf("json: %w", err)
		}
		return t, nil
	}
	return nil, fmt.Errorf("json: unexpected token %v", tok)
}

// exactInteger reports whether the JSON number literal, when it is an integer (no fraction, no
// exponent), is f exactly, or is how f is written (the shortest digits that read back as f,
// as EncodeJSON writes a big float: 1234567890123456800): an ID of 9007199254740993 would
// otherwise become ...992 in silence. A literal with a fraction or an exponent is a float, as
// rounded as its writer meant.
func exactInteger(literal string, f float64) bool {
	if strings.ContainsAny(literal, ".eE") {
		return true
	}
	if strconv.FormatFloat(f, 'f', -1, 64) == strings.TrimPrefix(literal, "+") {
		return true
	}
	if n, err := strconv.ParseInt(literal, 10, 64); err == nil {
		const exact = 1 << 53
		if -exact <= n && n <= exact {
			return true
		}
	}
	want, ok := new(big.Int).SetString(literal, 10)
	if !ok {
		return false
	}
	got, _ := new(big.Float).SetFloat64(f).Int(nil)
	return got.Cmp(want) == 0
}
