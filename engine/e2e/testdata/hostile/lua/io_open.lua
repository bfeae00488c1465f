-- want: lua/io_open.lua:2: 'io' is not available
return io.open(ctx.vars.outside .. "/secret.txt"):read("*a")
