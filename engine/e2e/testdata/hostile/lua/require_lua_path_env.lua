-- want: lua/require_lua_path_env.lua:3: require "evil": module not found
-- apollo runs with LUA_PATH pointing at a folder holding evil.lua.
return require("evil")
