-- want: lua/require_dotdot.lua:2: require "../../outside/evil": invalid module name
return require("../../outside/evil")
