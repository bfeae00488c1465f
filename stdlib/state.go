package stdlib

import (
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// stateFuncs is apollo.state, for `apollo script` recovery scripts.
func stateFuncs(env StateEnv) map[string]lua.LGFunction {
	return map[string]lua.LGFunction{
		"steps": func(L *lua.LState) int {
			steps := env.Steps()
			t := L.CreateTable(len(steps), 0)
			for _, s := range steps {
				st := L.CreateTable(0, 6)
				st.RawSetString("id", lua.LString(s.ID))
				st.RawSetString("status", lua.LString(s.Status))
				st.RawSetString("attempts", lua.LNumber(s.Attempts))
				st.RawSetString("retry_count", lua.LNumber(s.RetryCount))
				st.RawSetString("dirty", lua.LBool(s.Dirty))
				st.RawSetString("last_error", lua.LString(s.LastError))
				t.Append(st)
			}
			L.Push(t)
			return 1
		},
		"markers": func(L *lua.LState) int {
			ms := env.Markers()
			t := L.CreateTable(len(ms), 0)
			for _, m := range ms {
				mt := L.CreateTable(0, 2)
				mt.RawSetString("name", lua.LString(m.Name))
				mt.RawSetString("state", lua.LString(m.State))
				t.Append(mt)
			}
			L.Push(t)
			return 1
		},
		"reset":        intervene(env, "reset", "step"),
		"skip":         intervene(env, "skip", "step"),
		"clear_marker": intervene(env, "clear_marker", "marker name"),
	}
}

// intervene returns state.reset, state.skip or state.clear_marker: (target, why), why
// required, appended by env.Intervene.
func intervene(env StateEnv, action, what string) lua.LGFunction {
	fn := "state." + action
	return func(L *lua.LState) int {
		target := checkString(L, fn, 1, what)
		if target == "" {
			argError(L, fn, 1, "%s is empty", what)
		}
		why, _ := L.Get(2).(lua.LString)
		if strings.TrimSpace(string(why)) == "" {
			argError(L, fn, 2, "why is required: say why this intervention is made, it is recorded in the log")
		}
		checkContext(L, fn)
		if err := env.Intervene(action, target, string(why)); err != nil {
			raise(L, fn, "%v", err)
		}
		return 0
	}
}
