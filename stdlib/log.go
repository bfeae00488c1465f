package stdlib

import (
	"io"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"

	"apollo/luart"
)

func (lib *library) logFuncs() map[string]lua.LGFunction {
	return map[string]lua.LGFunction{
		"info":  lib.logAt("INFO"),
		"warn":  lib.logAt("WARN"),
		"error": lib.logAt("ERROR"),
	}
}

// logAt returns log.info, log.warn or log.error: one line "<RFC 3339 UTC> LEVEL message"
// written to env.Log() in one write. The arguments are joined by spaces; tables are shown as
// canonical JSON when they can be.
func (lib *library) logAt(level string) lua.LGFunction {
	fn := "log." + strings.ToLower(level)
	return func(L *lua.LState) int {
		var b strings.Builder
		b.WriteString(lib.now().UTC().Format(time.RFC3339))
		b.WriteByte(' ')
		b.WriteString(level)
		for i := 1; i <= L.GetTop(); i++ {
			b.WriteByte(' ')
			b.WriteString(logText(L, L.Get(i)))
		}
		b.WriteByte('\n')
		w := lib.env.Log()
		if w == nil {
			return 0
		}
		if _, err := io.WriteString(w, b.String()); err != nil {
			raise(L, fn, "cannot write to the step's output: %v", err)
		}
		return 0
	}
}

func logText(L *lua.LState, v lua.LValue) string {
	switch v := v.(type) {
	case lua.LString:
		return string(v)
	case *lua.LTable:
		if L.GetMetaField(v, "__tostring") == lua.LNil {
			if g, err := luart.ToGo(v); err == nil {
				if b, err := luart.EncodeJSON(g); err == nil {
					return string(b)
				}
			}
		}
	}
	return L.ToStringMeta(v).String()
}
