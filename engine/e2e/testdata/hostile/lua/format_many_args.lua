-- want: any
-- serial
local t = {}
for i = 1, 1e5 do t[i] = "x" end
return #string.format(string.rep("%s", 1e5), unpack(t))
