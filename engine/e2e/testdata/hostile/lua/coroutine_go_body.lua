-- want: SUCCESS
-- Coroutines whose bottom frame is a Go function: one made from a Go function,
-- resumed after another coroutine's error, and a body ending in a tail-called
-- yield. gopher-lua left the first half-switched and crashed the VM on both.
local bad = coroutine.create(function() error("boom") end)
assert(not coroutine.resume(bad))
local co = coroutine.create(coroutine.yield)
assert(coroutine.resume(co, 1))
local ok, v = coroutine.resume(co, 2)
assert(ok and v == 2, "resume of a yield body: " .. tostring(v))
local w = coroutine.wrap(function(a) return coroutine.yield(a) end)
assert(w(1) == 1 and w(2) == 2, "tail-called yield")
assert(coroutine.resume(coroutine.create(tostring), 1))
assert(coroutine.running() == nil, "the main thread is current again")
return "ok"
