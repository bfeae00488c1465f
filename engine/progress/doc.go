// Package progress shows a running task to a person: a live board of the
// running steps on a terminal, one plain line per step event elsewhere (logs,
// pipes, CI), or nothing but failures. It reads nothing of the run; the
// engine tells it what happens.
package progress
