-- want: (error object is a table value)
-- timeout: 3
error(setmetatable({}, {__tostring = function() while true do end end}))
