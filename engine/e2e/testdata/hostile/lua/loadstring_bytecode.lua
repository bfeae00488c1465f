-- want: lua/loadstring_bytecode.lua:2: 'loadstring' is not available
return loadstring("\27LuaQ\0")
