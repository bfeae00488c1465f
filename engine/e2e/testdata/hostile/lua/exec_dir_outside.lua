-- want: lua/exec_dir_outside.lua:2: exec.run: dir: path 
require("apollo.exec").run({"touch", "pwned"}, {dir = ctx.vars.outside})
