// Package engine loads pipelines, renders their templates, and runs them as
// a resumable DAG over the event log: it plans what a run must do from the
// log alone (keep, clean and rerun, rerun, skip), schedules steps in
// parallel with retries and timeouts, hands bodies to executors, and reports
// progress and results.
package engine
