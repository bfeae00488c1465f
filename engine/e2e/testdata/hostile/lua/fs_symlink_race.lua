-- want: SUCCESS
-- A command swaps the folder race/d between a real folder and a link out
-- while the script writes into it: no write may land outside. The command
-- stops on race/stop, and after 5000 swaps at most.
local exec, fs = require("apollo.exec"), require("apollo.fs")
fs.mkdir("race")
exec.run("(i=0; while [ ! -e race/stop ] && [ $i -lt 5000 ]; do i=$((i+1)); rm -rf race/d; mkdir race/d; rm -rf race/d; ln -s '" ..
  ctx.vars.outside .. "' race/d; done) >/dev/null 2>&1 &")
local wrote = 0
for i = 1, 300 do
  if pcall(fs.write, "race/d/written", "x") then wrote = wrote + 1 end
  pcall(fs.append, "race/d/appended", "x")
end
fs.write("race/stop", "")
return wrote
