-- want: timed out
while true do pcall(error, {}) end
