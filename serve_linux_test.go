package main

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/rogpeppe/go-internal/testscript"
)

// cmdROMount makes a folder read-only the way a backup or a snapshot is,
// for root too: romount DIR bind-mounts DIR onto itself read-only, undone
// when the script ends. Scripts check [romount] first.
func cmdROMount(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: romount DIR")
	}
	dir := ts.MkAbs(args[0])
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	if err := roMount(dir); err != nil {
		ts.Fatalf("romount %s: %v", dir, err)
	}
	ts.Defer(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
}

func roMount(dir string) error {
	if err := syscall.Mount(dir, dir, "", syscall.MS_BIND, ""); err != nil {
		return err
	}
	if err := syscall.Mount("", dir, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		syscall.Unmount(dir, syscall.MNT_DETACH)
		return err
	}
	return nil
}

// canROMount reports whether this process may make read-only bind mounts
// (root with CAP_SYS_ADMIN): the [romount] condition.
var canROMount = sync.OnceValue(func() bool {
	dir, err := os.MkdirTemp("", "apollo-romount")
	if err != nil {
		return false
	}
	defer os.Remove(dir)
	if roMount(dir) != nil {
		return false
	}
	syscall.Unmount(dir, syscall.MNT_DETACH)
	return true
})
