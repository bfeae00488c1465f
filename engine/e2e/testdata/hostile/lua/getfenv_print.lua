-- want: lua/getfenv_print.lua:2: 'getfenv' is not available
return getfenv(print).os
