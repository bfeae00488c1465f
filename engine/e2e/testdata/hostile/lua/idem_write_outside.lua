-- want: lua/idem_write_outside.lua:2: idem.write: path 
require("apollo.idem").write(ctx.vars.outside .. "/pwned", "x")
