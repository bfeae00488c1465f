-- want: 1 MiB
return string.rep("x", 2 * 1024 * 1024)
