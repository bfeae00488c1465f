-- want: lua/rawset_smuggle.lua:7: 'os' is not available
-- Put a table named os back into _G: it is only this script's own table,
-- and reading the real os still fails.
rawset(_G, "loadstring", function() return function() return "mine" end end)
assert(loadstring("x")() == "mine")
rawset(_G, "dofile", nil)
return os.getenv("HOME")
