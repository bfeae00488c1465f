-- want: value.self: cannot encode a table that contains itself
local t = {}
t.self = t
return t
