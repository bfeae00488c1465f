// Package executor runs step bodies behind one seam, Executor: shell bodies
// with /bin/sh in their own process group, held before the body's first line
// until the attempt's STEP_START is durable (and startable ahead of their
// turn, see AheadStarter); Lua bodies in a fresh sandboxed state, in-process
// or in a child apollo process (isolation: process). It also tags every
// process of an attempt, so that a later run can end what a crash left
// running (docs/spec.md §5).
package executor
