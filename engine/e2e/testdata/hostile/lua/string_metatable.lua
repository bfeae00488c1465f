-- want: SUCCESS
-- Changing the string metatable changes only this state; the next step
-- (after) checks that ("x"):upper() still works there.
local mt = getmetatable("")
mt.__index = function() return function() return "pwned" end end
assert(("x"):upper() == "pwned")
return "changed"
