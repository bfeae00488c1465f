-- want: memory limit exceeded
local t, i = {}, 0
while true do i = i + 1; t[i] = {i, i, i} end
