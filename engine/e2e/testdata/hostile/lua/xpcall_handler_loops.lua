-- want: timed out
xpcall(function() error("first") end, function() while true do end end)
