// Package completion writes the shell completion scripts of apollo
// completion (bash, zsh, fish) from a description of the commands, their
// arguments and their flags; the scripts ask apollo list for task ids when
// a completion needs one.
package completion
