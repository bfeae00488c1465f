// Package intervene records manual interventions in a task's event log —
// reset a step, skip a step, clear an idempotency marker — as the
// WARNING-backed records of docs/spec.md §4.3, checked against the task's
// replayed state and appended durably under the log's lock. apollo script
// (apollo.state) and apollo serve both go through it, so the two write the
// same records with the same messages.
package intervene
