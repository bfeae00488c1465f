-- want: any
local t = {}
for i = 1, 1e4 do t[i] = (i * 7919) % 1000 end
table.sort(t, function(a, b) return true end)
return #t
