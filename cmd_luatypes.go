package main

import (
	"context"

	"apollo/scripts"
)

func luaTypesCommand() *command[*noOptions] {
	return &command[*noOptions]{
		about: about{name: "lua-types", exitCodes: simpleExitCodes, summary: "print the LuaLS annotations for ctx and apollo.*",
			usage: "apollo lua-types > apollo-types.lua", example: "  apollo lua-types > .luals/apollo.lua"},
		nargs: positional{0, -1, ""}, // arguments are ignored
		run:   runLuaTypes,
	}
}

// runLuaTypes prints the LuaLS annotations of ctx and the apollo.* modules.
func runLuaTypes(_ context.Context, _ *noOptions, in invocation) error {
	_, err := in.stdout.Write(scripts.LuaTypes())
	return err
}
