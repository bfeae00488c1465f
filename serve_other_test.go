//go:build !linux

package main

import "github.com/rogpeppe/go-internal/testscript"

// cmdROMount needs Linux's bind mounts; scripts check [romount] first.
func cmdROMount(ts *testscript.TestScript, neg bool, args []string) {
	ts.Fatalf("romount: read-only bind mounts are Linux's")
}

func canROMount() bool { return false }
