// Package nemesis proves scale-out under a randomized fault schedule
// (docs/reliability.md, "The nemesis"). Its tests start real processes on
// 127.0.0.1 — three apollo hub nodes, apollo workers, and apollo run
// coordinators that take a task over from each other — with a fault-injecting
// TCP proxy in front of every connection, and inject kill -9, SIGSTOP
// pauses longer than the liveness and lease deadlines, and partitions, with
// a seed that replays the schedule. Check is the invariants every such run
// must keep, read from the coordinators' logs and the effects the steps
// wrote.
package nemesis
