-- want: lua/fs_planted_link.lua:5: fs.write: path "planted/pwned" is outside the workspace
-- A link planted during the step (by a command) is not followed out.
local exec = require("apollo.exec")
exec.run({"ln", "-sfn", ctx.vars.outside, "planted"})
require("apollo.fs").write("planted/pwned", "x")
