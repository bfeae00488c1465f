-- want: timed out
local line = string.rep("x", 1e5)
for i = 1, 100 do print(line) end
while true do end
