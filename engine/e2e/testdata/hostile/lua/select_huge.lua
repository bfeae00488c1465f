-- want: lua/select_huge.lua:3: bad argument #1 to select (index out of range)
local a = select(1e8, 1, 2, 3)
return select(-1e8, 1, 2, 3)
