-- want: lua/tostring_recursion.lua:3: stack overflow (more than 256 nested calls)
local t
t = setmetatable({}, {__tostring = function(s) return "a" .. tostring(s) end})
return tostring(t)
