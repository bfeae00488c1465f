-- want: lua/deep_recursion.lua:2: stack overflow (more than 256 nested calls)
local function f(n) return 1 + f(n + 1) end
return f(1)
