-- want: levels deep
-- serial
local t = {}
local cur = t
for i = 1, 1000 do cur.x = {}; cur = cur.x end
return t
