-- want: SUCCESS
-- A FIFO planted in the workspace (no writer ever opens it): every apollo.*
-- call that touches a path refuses it at once rather than waiting forever.
local exec, fs, idem, digest = require("apollo.exec"), require("apollo.fs"), require("apollo.idem"), require("apollo.digest")
assert(exec.run({"mkfifo", "pipe"}).code == 0, "mkfifo failed")
local calls = {
  function() return fs.read("pipe") end,
  function() return fs.append("pipe", "x") end,
  function() return fs.write("pipe", "x") end,
  function() return idem.write("pipe", "x") end,
  function() return idem.replace("pipe", "k", {{a = 1}}) end,
  function() return digest.file("pipe") end,
}
for i, call in ipairs(calls) do
  local ok, err = pcall(call)
  assert(not ok, "call " .. i .. " on a FIFO succeeded")
  assert(tostring(err):find("not a regular file", 1, true), "call " .. i .. ": " .. tostring(err))
end
