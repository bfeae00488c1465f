-- want: lua/debug_getupvalue.lua:2: 'debug' is not available
return debug.getupvalue(require, 1)
