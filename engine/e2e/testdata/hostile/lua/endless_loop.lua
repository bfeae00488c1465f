-- want: timed out
while true do end
