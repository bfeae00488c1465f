-- want: any
-- serial
return select("#", string.byte(string.rep("x", 2e6), 1, -1))
