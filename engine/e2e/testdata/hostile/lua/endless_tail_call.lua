-- want: timed out after 300ms
-- isolation: process
-- gopher-lua's traceback of this error has a line per tail call made (gigabytes
-- after a few seconds); apollo's protected calls keep none for a stopped state.
local function f() return f() end
return f()
