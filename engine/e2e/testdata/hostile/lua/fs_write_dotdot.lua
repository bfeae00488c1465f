-- want: lua/fs_write_dotdot.lua:2: fs.write: path 
require("apollo.fs").write("../../../../../../../../../../" .. ctx.vars.outside .. "/pwned", "x")
