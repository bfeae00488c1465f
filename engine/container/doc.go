// Package container runs a command step's body in a container of its image
// through an OCI engine's CLI (podman or docker; docs/spec.md §2.12): the
// image made present and resolved to its id, the engine's command line of
// one attempt, the run of that line through a shell executor with the
// container ended on a timeout or a stop, and the removal of a container an
// attempt left. Both a local run (package engine) and a worker (package
// worker) run containers through it, so a container step behaves the same
// wherever it runs.
package container
