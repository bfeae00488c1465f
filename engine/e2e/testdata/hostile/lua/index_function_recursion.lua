-- want: lua/index_function_recursion.lua:2: stack overflow (more than 256 nested calls)
local t = setmetatable({}, {__index = function(t, k) return t[k] end})
return t.missing
