-- want: any
-- serial
local t = {}
for i = 1, 2e5 do t[i] = 65 end
return #string.char(unpack(t))
