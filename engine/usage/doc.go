// Package usage defines the error of a command line that asks for what
// cannot be done — a bad flag, an unknown task id, a step a pipeline does not
// have. Nothing was run or written when it is returned, and apollo exits 2
// (docs/spec.md §7).
package usage
