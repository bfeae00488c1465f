-- want: xxxxxxxx
-- serial
error(string.rep("x", 1e7))
