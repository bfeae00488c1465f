// Package executor runs step bodies behind one seam, Executor: shell bodies
// with /bin/sh in their own process group, held before the body's first line
// until the attempt's STEP_START is durable (and startable ahead of their
// turn, see AheadStarter); Lua bodies in a fresh sandboxed state, in-process
// or in a child apollo process (isolation: process). It also tags every
// process of an attempt, so that a later run can end what a crash left
// running (docs/spec.md §5).
//
// What differs by system sits in files named for it. On Linux (_linux.go) a
// body's exit is learnt from its pidfd, an attempt's processes are found in
// /proc, a shell started ahead is checked against its workspace folder
// through /proc, and an isolated child's memory is capped with RLIMIT_DATA.
// On macOS (_darwin.go, and _other.go for what is portable) the exit is
// polled for, processes are found through sysctl(3), a shell started ahead
// is not reused, and the child has only a soft memory limit.
package executor
