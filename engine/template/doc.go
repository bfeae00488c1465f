// Package template renders the {{name}} placeholders of pipeline templates.
// In shell commands each value is escaped for the shell context its
// placeholder sits in (unquoted, '...' or "..."), found by a small lexer of
// POSIX shell syntax, so that no value can inject shell syntax; elsewhere
// values are substituted as they are. It imports nothing of apollo.
package template
