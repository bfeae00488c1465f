-- want: memory limit exceeded
local t = {}
for i = 1, 1e5 do t[i] = string.rep("x", 1e4) .. i end
return #table.concat(t)
