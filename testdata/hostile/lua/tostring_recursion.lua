-- want: overflow
local t
t = setmetatable({}, {__tostring = function(s) return "a" .. tostring(s) end})
return tostring(t)
