// Package markers keeps a task's idempotency markers (apollo.idem.once,
// idem.resource) as its event log records them: MARKER records read at
// open, appended by this process durably, or appended by another process,
// and the clear_marker interventions that remove them (docs/spec.md §6).
package markers
