//go:build !race

package luaproc

// raceEnabled: see race_test.go.
const raceEnabled = false
