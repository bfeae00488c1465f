-- want: lua/fs_read_absolute.lua:2: fs.read: path 
return require("apollo.fs").read(ctx.vars.outside .. "/secret.txt")
