-- want: memory limit exceeded
return #string.rep("x", 4e9)
