-- want: memory limit exceeded
return #(string.rep("a", 1e6):gsub("a", string.rep("b", 1000)))
