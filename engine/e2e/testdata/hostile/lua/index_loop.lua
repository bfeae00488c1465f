-- want: lua/index_loop.lua:4: too many recursions in gettable
local t = setmetatable({}, {})
getmetatable(t).__index = t
return t.missing
