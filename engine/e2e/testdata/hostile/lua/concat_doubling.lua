-- want: memory limit exceeded
local s = "s"
while true do s = s .. s end
