// Package cron runs pipelines on their schedules for apollo serve, and
// keeps the schedule log: which scheduled, caught-up, backfilled and manual
// runs apollo serve started, skipped, queued or missed, and how each child
// apollo run exited (docs/spec.md §9.4, §9.5). It also runs a pipeline's
// triggers: — another pipeline's run ending, a file arriving, a signed
// webhook — each decision a keyed entry of the same log (§9.10). The log
// is JSON Lines under the event log's rules — a seq and a CRC-32C on every
// line, torn tails cut and kept aside, damage elsewhere refused — so a
// restart of serve picks up where it stopped: it neither misses a
// scheduled time nor starts one twice. Runs are ordinary apollo run child
// processes; this package never writes a task's event log (an after:
// trigger reads the upstream's for its outputs). With a Shared (apollo
// serve --hub), several serves share the schedules: the log lives in the
// hub, one serve leads, and a serve that lost the lead acts on nothing
// (shared.go).
package cron
