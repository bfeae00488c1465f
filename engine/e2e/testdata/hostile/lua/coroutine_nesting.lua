-- want: lua/coroutine_nesting.lua:5: coroutine nesting deeper than 200
-- isolation: process
-- Unwinding 100,000 nested coroutines took minutes; nesting stops at 200.
local function f(n)
  return coroutine.wrap(function() return f(n + 1) end)()
end
return f(1)
