-- want: any
-- serial
return select("#", unpack({}, 1, 1e8))
