//go:build linux

package web

import (
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotify watches folders with Linux's inotify: a write to a log wakes the
// pages that show it at once, and nothing is read while nothing changes.
type inotify struct {
	f   *os.File
	out chan change

	mu   sync.Mutex
	dirs map[int]string // watch descriptor -> folder
}

func newWatcher() (watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return newPoller(), nil
	}
	w := &inotify{f: os.NewFile(uintptr(fd), "inotify"), out: make(chan change, 256), dirs: map[int]string{}}
	go w.read()
	return w, nil
}

func (w *inotify) add(dir string) error {
	wd, err := unix.InotifyAddWatch(int(w.f.Fd()), dir,
		unix.IN_MODIFY|unix.IN_CREATE|unix.IN_DELETE|unix.IN_MOVED_TO|unix.IN_MOVED_FROM|unix.IN_CLOSE_WRITE|unix.IN_ATTRIB)
	if err != nil {
		return &os.PathError{Op: "watch", Path: dir, Err: err}
	}
	w.mu.Lock()
	w.dirs[wd] = dir
	w.mu.Unlock()
	return nil
}

func (w *inotify) changes() <-chan change { return w.out }

func (w *inotify) close() error { return w.f.Close() }

// read turns inotify events into changes until the file is closed.
func (w *inotify) read() {
	defer close(w.out)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameBytes := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			name := string(nameBytes)
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			w.mu.Lock()
			dir, ok := w.dirs[int(ev.Wd)]
			w.mu.Unlock()
			if !ok && ev.Mask&unix.IN_Q_OVERFLOW == 0 {
				continue
			}
			select {
			case w.out <- change{dir: dir, name: name}:
			default: // the reader is behind: it rescans on the next change anyway
			}
		}
	}
}
