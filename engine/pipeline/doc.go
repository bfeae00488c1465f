// Package pipeline is apollo's pipeline language: the Pipeline and Step
// types, strict loading of a YAML file with every problem reported at once
// (file, line, step, what to do), validation of the step graph and of what
// steps name outside the file (sub-pipelines included, loaded in turn), the
// JSON Schema for editors, and the graph's topological order (docs/spec.md
// §2).
package pipeline
