-- want: SUCCESS
-- Marker names live in the log only; a name like a path creates no file.
return require("apollo.idem").once("../../../" .. ctx.vars.outside .. "/pwned", function() return 1 end)
