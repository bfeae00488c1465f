-- want: memory limit exceeded
return #string.rep("x", 1e6):rep(1e3)
