// Package web is apollo serve: the runs of one or more state folders as
// HTML pages and their JSON twins under /api/ (the shapes of apollo list
// --json and inspect --json), each run's DAG and timeline drawn as SVG on
// the server, live updates by server-sent events driven by watching the
// logs (inotify on Linux, a slower poll elsewhere), the pipelines folder
// with schedules, authenticated interventions, and /metrics for
// Prometheus (docs/spec.md §9).
//
// It is a reader like apollo inspect: everything it shows comes from the
// logs, followed incrementally by an index that starts from a cache of
// finished runs; everything it changes goes through engine/intervene
// (interventions appended under the log's lock) or engine/cron (apollo run
// child processes, recorded in the schedule log). It never imports the
// scheduler of runs.
package web
