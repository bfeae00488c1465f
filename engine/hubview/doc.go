// Package hubview keeps a copy of every task's log that the hub holds, in
// a folder laid out as a state folder's, for apollo serve --hub to show
// the whole cluster with the pages, API and metrics it has for a state
// folder (docs/spec.md §8.8). It follows the hub's log stream from its
// first record, writes each record's exact line to the task's copy, drops
// the copy of a task whose log the hub no longer holds (apollo gc --hub),
// and knows who holds each task's lease.
package hubview
