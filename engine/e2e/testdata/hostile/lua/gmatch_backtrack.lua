-- want: timed out
for m in string.rep("a", 1e4):gmatch(string.rep("a?", 20) .. string.rep("a", 20) .. "b") do end
