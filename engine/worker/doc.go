// Package worker is apollo worker (docs/spec.md §8): it pulls the attempts
// of its pool from the hub and runs each with the same executors as local
// mode (engine/executor: shell in its own process group behind the held
// body, the Lua sandbox, timeouts, output caps).
//
// For one attempt it reports the start and waits for the hub to store it
// before the body may run; heartbeats while the body runs, each confirmed
// by a round trip; ends the body's process group itself (fences itself)
// once no heartbeat has been confirmed for the liveness deadline less a
// margin, reporting nothing more; reports LOST instead of running an
// attempt the hub delivers a second time; streams the attempt's output to
// the coordinator; reports the end, and acknowledges the message only once
// the end is stored. The processes of the attempts it runs are recorded in
// a file under its state folder, so that the next worker started there
// ends what a killed worker left running.
package worker
