-- want: lua/require_package_path.lua:3: require "evil": module not found
package.path = ctx.vars.outside .. "/?.lua"
return require("evil")
