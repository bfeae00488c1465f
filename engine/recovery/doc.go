// Package recovery runs recovery scripts (apollo script): Lua in the
// sandbox with apollo.state, which reads a task's steps and markers and
// appends interventions — reset, skip, clear_marker — to its log under the
// log's lock, for the next apollo run to honour. It never rewrites a past
// line, and it shares nothing with a running task but the log.
package recovery
