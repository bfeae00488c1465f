//go:build !linux

package web

func newWatcher() (watcher, error) { return newPoller(), nil }
