//go:build linux

package web

import (
	"errors"
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// notifier watches folders through fsnotify (inotify on Linux): a write to
// a log wakes the pages that show it at once, and nothing is read while
// nothing changes.
type notifier struct {
	w   *fsnotify.Watcher
	out chan change

	mu   sync.Mutex
	dirs map[string]string // cleaned path -> the folder as it was added
}

func newWatcher() (watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return newPoller(), nil // no inotify here (or no instances left): look instead
	}
	n := &notifier{w: w, out: make(chan change, 256), dirs: map[string]string{}}
	go n.loop()
	return n, nil
}

func (n *notifier) add(dir string) error {
	if err := n.w.Add(dir); err != nil {
		return err
	}
	n.mu.Lock()
	n.dirs[filepath.Clean(dir)] = dir
	n.mu.Unlock()
	return nil
}

func (n *notifier) changes() <-chan change { return n.out }

func (n *notifier) close() error { return n.w.Close() }

// loop turns fsnotify's events into changes until the watcher is closed.
// When the kernel's queue overflowed, every folder is reported changed
// with no entry named, so that what watches it looks again.
func (n *notifier) loop() {
	defer close(n.out)
	for {
		select {
		case ev, ok := <-n.w.Events:
			if !ok {
				return
			}
			n.mu.Lock()
			dir, known := n.dirs[filepath.Dir(ev.Name)]
			n.mu.Unlock()
			if known {
				n.send(change{dir: dir, name: filepath.Base(ev.Name)})
			}
		case err, ok := <-n.w.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				n.mu.Lock()
				var dirs []string
				for _, d := range n.dirs {
					dirs = append(dirs, d)
				}
				n.mu.Unlock()
				for _, d := range dirs {
					n.send(change{dir: d})
				}
			}
		}
	}
}

func (n *notifier) send(c change) {
	select {
	case n.out <- c:
	default: // the reader is behind: it rescans on the next change anyway
	}
}
