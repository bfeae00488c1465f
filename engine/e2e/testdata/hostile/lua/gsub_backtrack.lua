-- want: timed out
return (string.rep("a", 2e4):gsub(string.rep("a-", 25) .. "b", "x"))
