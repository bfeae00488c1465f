// Package statedir names the files under apollo's state folder — logs,
// locks, snapshots, artifacts, step outputs and the archive — and finds and
// reads a task's logs, live (.jsonl) or archived by gc (.jsonl.gz). It is the
// one place that parses a log file's name (docs/spec.md §3).
package statedir
