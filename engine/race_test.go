//go:build race

package engine

// raceEnabled is set when the tests are built with -race: the detector's
// shadow memory then counts against a Lua process's RLIMIT_DATA, so a body
// under its memory_mb in Lua terms may die of it.
const raceEnabled = true
