-- want: memory limit exceeded (memory_mb 64)
-- isolation: process
local t, i = {}, 0
while true do i = i + 1; t[i] = {i, i, i} end
