-- want: timed out after 1s: the isolated Lua process was killed
-- isolation: process
-- In-process, gopher-lua's traceback of a stopped endless tail call holds a
-- line per tail call made (gigabytes after a few seconds); only a child
-- process bounds it.
local function f() return f() end
return f()
