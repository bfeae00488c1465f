-- want: timed out after 1s: the isolated Lua process was killed
-- isolation: process
-- In-process, unwinding 100,000 nested coroutines takes minutes (each level
-- re-panics through the ones below); only a child process bounds it.
local function f(n) return coroutine.wrap(function() return f(n + 1) end)() end
return f(1)
