-- want: memory limit exceeded (64 MiB)
-- isolation: process
local t, i = {}, 0
while true do i = i + 1; t[i] = {i, i, i} end
