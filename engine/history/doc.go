// Package history is apollo's read-only view of past and running tasks, from
// their event logs alone: inspect (where a task stands), list (every run in
// a state folder), logs (a run's events, a step's output, followed live),
// graph (the DAG coloured by state); and gc, which archives old finished
// runs. It reads the state folder and the pipeline language, never the
// scheduler (docs/spec.md §7).
package history
