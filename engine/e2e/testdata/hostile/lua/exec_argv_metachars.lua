-- want: SUCCESS
-- An argv table is passed as is: no shell sees the metacharacters.
local r = require("apollo.exec").run({"echo", "a; touch pwned; $(touch pwned2)"})
assert(r.code == 0, "exit " .. tostring(r.code))
return r.stdout
