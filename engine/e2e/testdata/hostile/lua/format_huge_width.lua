-- want: any
-- serial
return #string.format("%099999d", 1)
