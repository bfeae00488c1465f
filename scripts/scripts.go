package scripts

import (
	"embed"
	"io/fs"
)

//go:embed *.lua types/apollo.lua
var files embed.FS

// Modules returns the bundled step modules, by file name (publish.lua …).
func Modules() fs.FS { return files }

// LuaTypes returns the LuaLS annotation file for apollo.* and ctx.
func LuaTypes() []byte {
	b, err := files.ReadFile("types/apollo.lua")
	if err != nil {
		return nil // embedded at build time: cannot fail
	}
	return b
}
