package luart

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// TestTimeouts: code that never ends stops when the context's deadline passes, with an error
// that classifies as ErrTimeout.
func TestTimeouts(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, code string }{
		{"endless loop", "while true do end"},
		{"numeric for", "local x = 0 for i = 1, 1e15 do x = x + i end"},
		{"goto loop", "::top:: goto top"},
		{"inside pcall", "while true do pcall(function() while true do end end) end"},
		{"pcall swallowing errors", "while true do pcall(error, 'x') end"},
		{"xpcall handler", "while true do xpcall(error, function() while true do end end) end"},
		{"inside coroutine", "coroutine.wrap(function() while true do end end)()"},
		{"coroutine ping-pong", "local co = coroutine.wrap(function() while true do coroutine.yield() end end) while true do co() end"},
		{"infinite tail call", "local function f() return f() end return f()"},
		{"sort comparator", "table.sort({3, 2, 1, 5, 4}, function(a, b) while true do end end)"},
		{"gsub callback", "('abc'):gsub('%w', function() while true do end end)"},
		{"gsub in a loop", "local s = ('a'):rep(100000) while true do s:gsub('a', function(c) return c end) end"},
		{"backtracking find", "return (('a'):rep(40) .. 'b'):find(('a*'):rep(40) .. 'c')"},
		{"backtracking match", "return (('a'):rep(40) .. 'b'):match(('a-'):rep(40) .. 'c')"},
		// (Locals: gopher-lua v1.1.2 crashes on `for x in (a .. b):gmatch(c .. d)`.)
		{"backtracking gmatch", "local s, p = ('a'):rep(40) .. 'b', ('a*'):rep(40) .. 'c' for x in s:gmatch(p) do end"},
		{"backtracking gsub", "return (('a'):rep(40) .. 'b'):gsub(('a*'):rep(40) .. 'c', 'x')"},
		{"metamethod loop", "local t = setmetatable({}, {__index = function(t, k) while true do end end}) return t.x"},
		{"tostring loop", "print(setmetatable({}, {__tostring = function() while true do end end}))"},
	}
	rt := New(Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeoutCause(t.Context(), 200*time.Millisecond, ErrTimeout)
			defer cancel()
			s, err := rt.NewState(ctx, StateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			_, err = s.DoChunk("limits.lua", tt.code)
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("error = %v, want ErrTimeout", err)
			}
			var se *StopError
			if !errors.As(err, &se) {
				t.Fatalf("error = %T, want a *StopError", err)
			}
			if got := err.Error(); !strings.HasSuffix(got, "timeout") {
				t.Errorf("message = %q, want it to end with %q", got, "timeout")
			}
			// The state refuses to run more code.
			if _, err := s.DoChunk("again.lua", "return 1"); !errors.Is(err, ErrTimeout) {
				t.Errorf("after the timeout: %v, want ErrTimeout", err)
			}
		})
	}
}

// TestCancelCauses: the error is classified by the context's cause, whatever the message.
func TestCancelCauses(t *testing.T) {
	t.Parallel()
	rt := New(Options{})
	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		s, err := rt.NewState(ctx, StateOptions{Modules: map[string]lua.LGFunction{"test.stop": func(L *lua.LState) int {
			L.Push(L.NewFunction(func(L *lua.LState) int { cancel(); return 0 }))
			return 1
		}}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = s.DoChunk("cancel.lua", "local stop = require('test.stop')\nstop()\nwhile true do end")
		if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrMemory) {
			t.Errorf("error = %v, want context.Canceled only", err)
		}
		var se *StopError
		if errors.As(err, &se) && !strings.HasPrefix(se.Where, "cancel.lua:") {
			t.Errorf("Where = %q, want a position in cancel.lua", se.Where)
		}
	})
	t.Run("plain deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		s, err := rt.NewState(ctx, StateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = s.DoChunk("deadline.lua", "while true do end")
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error = %v, want ErrTimeout and context.DeadlineExceeded", err)
		}
	})
	t.Run("go helper sees the context", func(t *testing.T) {
		ctx, cancel := context.WithTimeoutCause(t.Context(), 50*time.Millisecond, ErrTimeout)
		defer cancel()
		s, err := rt.NewState(ctx, StateOptions{Modules: map[string]lua.LGFunction{"test.wait": func(L *lua.LState) int {
			L.Push(L.NewFunction(func(L *lua.LState) int {
				<-L.Context().Done()
				L.RaiseError("wait: %v", context.Cause(L.Context()))
				return 0
			}))
			return 1
		}}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		_, err = s.DoChunk("wait.lua", "require('test.wait')()")
		if !errors.Is(err, ErrTimeout) {
			t.Errorf("error = %v, want ErrTimeout", err)
		}
	})
}

// memoryBombs each allocate without end (or ask a builtin for too much) and must stop with
// ErrMemory under a 64 MiB limit.
var memoryBombs = []struct{ name, code string }{
	{"string.rep", "return string.rep('x', 1e12)"},
	{"string.rep overflow", "return ('xx'):rep(2^62)"},
	{"string.rep under pcall", "pcall(string.rep, 'x', 1e12) return 'survived'"},
	{"concat doubling", "local s = 'x' while true do s = s .. s end"},
	{"table growth", "local t = {} local i = 0 while true do i = i + 1 t[i] = {i} end"},
	{"string accumulation", "local t = {} while true do t[#t + 1] = ('x'):rep(1e6) .. #t end"},
	{"coroutines", "local t = {} while true do t[#t + 1] = coroutine.create(function() end) end"},
	{"table.concat", "local s = ('x'):rep(1e6) local t = {} for i = 1, 1000 do t[i] = s end return table.concat(t)"},
	{"string.format", "local t = {} for i = 1, 100 do t[i] = i end return string.format(('%999999d'):rep(100), unpack(t))"},
	{"string.gsub", "local s = ('x'):rep(1e6) return s:gsub('x', ('y'):rep(100))"},
}

// TestMemoryBombs runs the bombs one at a time (not in parallel: the heap is shared).
func TestMemoryBombs(t *testing.T) {
	rt := New(Options{})
	for _, tt := range memoryBombs {
		t.Run(tt.name, func(t *testing.T) {
			runtime.GC() // start from a clean heap, so bombs do not pay for each other's garbage
			s := newState(t, rt, StateOptions{MemoryLimitMB: 64})
			_, err := s.DoChunk("bomb.lua", tt.code)
			s.Close()
			if !errors.Is(err, ErrMemory) {
				t.Fatalf("error = %v, want ErrMemory", err)
			}
			var se *StopError
			if !errors.As(err, &se) {
				t.Fatalf("error = %T, want a *StopError", err)
			}
			if !strings.Contains(err.Error(), "memory limit exceeded") {
				t.Errorf("message = %q, want it to say memory limit exceeded", err)
			}
		})
	}
}

// TestBombSparesOthers: a bomb in one state stops with ErrMemory while another state running a
// normal loop finishes.
func TestBombSparesOthers(t *testing.T) {
	runtime.GC()
	rt := New(Options{})
	var done atomic.Bool
	syncMod := map[string]lua.LGFunction{"test.sync": func(L *lua.LState) int {
		L.Push(L.NewFunction(func(L *lua.LState) int {
			time.Sleep(time.Millisecond) // like a step waiting on I/O: leave the CPU to the bomb
			L.Push(lua.LBool(done.Load()))
			return 1
		}))
		return 1
	}}
	normal := newState(t, rt, StateOptions{MemoryLimitMB: 64, Modules: syncMod})
	type result struct {
		res []lua.LValue
		err error
	}
	normalDone := make(chan result, 1)
	go func() {
		res, err := normal.DoChunk("normal.lua", `
			local done = require("test.sync")
			local n = 0
			while not done() do n = n + 1 end
			return n`)
		normalDone <- result{res, err}
	}()

	bomb := newState(t, rt, StateOptions{MemoryLimitMB: 64})
	_, err := bomb.DoChunk("bomb.lua", "local t = {} local i = 0 while true do i = i + 1 t[i] = {i} end")
	bomb.Close()
	done.Store(true)
	if !errors.Is(err, ErrMemory) {
		t.Errorf("bomb: error = %v, want ErrMemory", err)
	}
	r := <-normalDone
	if r.err != nil {
		t.Fatalf("normal state: %v, want it to finish", r.err)
	}
	if len(r.res) != 1 || r.res[0].Type() != lua.LTNumber {
		t.Errorf("normal state returned %v, want a count", r.res)
	}
}

// TestParallelBombs: two bombs at once both stop with ErrMemory.
func TestParallelBombs(t *testing.T) {
	runtime.GC()
	rt := New(Options{})
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		s := newState(t, rt, StateOptions{MemoryLimitMB: 64})
		wg.Go(func() {
			_, errs[i] = s.DoChunk("bomb.lua", "local t = {} local i = 0 while true do i = i + 1 t[i] = {i} end")
			s.Close()
		})
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, ErrMemory) {
			t.Errorf("bomb %d: error = %v, want ErrMemory", i, err)
		}
	}
}

// TestBigButBounded: large work within the limits works; the registry settings let
// table.concat, unpack and string.byte handle 100k values.
func TestBigButBounded(t *testing.T) {
	t.Parallel()
	s := newState(t, New(Options{}), StateOptions{})
	res, err := s.DoChunk("big.lua", `
		local t = {}
		for i = 1, 100000 do t[i] = "item" .. i end
		local joined = table.concat(t, ",")
		local n = select("#", unpack(t))
		local bytes = select("#", string.byte(("x"):rep(200000), 1, -1))
		local rep = #string.rep("ab", 4 * 1024 * 1024)
		local sub, count = (("ab"):rep(100000)):gsub("a", "xy")
		local words = 0
		for w in (("word "):rep(100000)):gmatch("%a+") do words = words + 1 end
		return #joined, n, bytes, rep, #sub, count, words`)
	if err != nil {
		t.Fatal(err)
	}
	wantJoined := 0
	for i := 1; i <= 100000; i++ {
		wantJoined += len("item") + len(itoa(i))
	}
	wantJoined += 100000 - 1
	want := []float64{float64(wantJoined), 100000, 200000, 8 << 20, 300000, 100000, 100000}
	for i, w := range want {
		if got := float64(res[i].(lua.LNumber)); got != w {
			t.Errorf("result %d = %v, want %v", i+1, got, w)
		}
	}
}

func itoa(i int) string { return lua.LNumber(i).String() }
