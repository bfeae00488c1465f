-- want: lua/exec_dir_link.lua:2: exec.run: dir: path "link" is outside the workspace
require("apollo.exec").run({"touch", "pwned"}, {dir = "link"})
