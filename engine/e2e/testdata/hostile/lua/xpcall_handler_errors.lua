-- want: SUCCESS
local ok, msg = xpcall(function() error("first") end, function(m) error("second") end)
assert(not ok)
return tostring(msg)
