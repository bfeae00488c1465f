//go:build unix

package cron

import "syscall"

// ownGroup puts a child in a process group of its own: a Ctrl-C meant for
// apollo serve does not interrupt the runs it started.
func ownGroup() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
