// Package textfmt writes what apollo shows people and machines the same way
// everywhere: durations rounded to what a person reads, messages folded to
// one line, byte sizes, and indented JSON for --json output.
package textfmt
