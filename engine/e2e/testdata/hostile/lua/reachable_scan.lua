-- want: SUCCESS
-- Walk every table reachable from _G (values, keys and metatables) and fail
-- if a dangerous function is reachable under any name.
local bad = {execute = true, popen = true, open = true, loadstring = true, load = true,
  dofile = true, loadfile = true, getfenv = true, setfenv = true, getinfo = true,
  sethook = true, getupvalue = true, setupvalue = true, getregistry = true, newproxy = true,
  collectgarbage = true, dump = true, loadlib = true, exit = true, tmpname = true,
  getenv = true, _printregs = true, module = true}
local seen, n = {}, 0
local function walk(t, path)
  if seen[t] then return end
  seen[t] = true
  local mt = getmetatable(t)
  if type(mt) == "table" then walk(mt, path .. "<mt>") end
  for k, v in next, t do
    n = n + 1
    if type(v) == "function" and bad[k] then
      error("reachable: " .. path .. "." .. tostring(k))
    end
    if type(v) == "table" then walk(v, path .. "." .. tostring(k)) end
    if type(k) == "table" then walk(k, path .. "[key]") end
  end
end
walk(_G, "_G")
local smt = getmetatable("")
if type(smt) == "table" then walk(smt, "<string mt>") end
return n > 0
