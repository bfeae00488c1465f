//go:build race

package luaproc

// raceEnabled is set when the tests are built with -race: the detector's
// shadow memory then counts against the child's RLIMIT_DATA, so a job under
// its limit in Lua terms may die of it.
const raceEnabled = true
