package worker

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"apollo/engine/executor"
)

// runningFile records the process groups of the attempts a worker runs,
// with the tag their processes carry, in <state>/workers/<host>-<pid>.json,
// locked (flock) while the worker lives. A worker that starts ends what the
// unlocked files of dead workers name: leftover groups are ended at the
// next start, as local mode ends a crashed run's processes.
type runningFile struct {
	dir  string
	path string
	lock *flock.Flock
	mu   sync.Mutex
	tags map[string]int // attempt tag → pgid
}

func openRunning(dir, id string) (*runningFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("worker: state folder: %w", err)
	}
	name := strings.NewReplacer(":", "-", "/", "-").Replace(id) + ".json"
	r := &runningFile{dir: dir, path: filepath.Join(dir, name), tags: map[string]int{}}
	r.lock = flock.New(r.path + ".lock")
	ok, err := r.lock.TryLock()
	if err != nil || !ok {
		return nil, fmt.Errorf("worker: lock %s: %v", r.path, err)
	}
	if err := r.write(); err != nil {
		r.lock.Unlock()
		return nil, err
	}
	return r, nil
}

// endLeftovers ends the processes that dead workers' files name, and
// removes the files. It returns how many processes it ended.
func (r *runningFile) endLeftovers(grace time.Duration) int {
	files, _ := filepath.Glob(filepath.Join(r.dir, "*.json"))
	n := 0
	for _, f := range files {
		if f == r.path {
			continue
		}
		l := flock.New(f + ".lock")
		ok, err := l.TryLock()
		if err != nil || !ok {
			continue // its worker is alive
		}
		var tags map[string]int
		if b, err := os.ReadFile(f); err == nil && json.Unmarshal(b, &tags) == nil {
			for tag, pgid := range tags {
				n += executor.EndLeftovers(tag, pgid, grace)
			}
		}
		os.Remove(f)
		os.Remove(f + ".lock")
		l.Unlock()
	}
	// Attempt folders of dead workers.
	dirs, _ := filepath.Glob(filepath.Join(r.dir, "attempt-*"))
	for _, d := range dirs {
		if fi, err := os.Stat(d); err == nil && time.Since(fi.ModTime()) > time.Hour {
			os.RemoveAll(d)
		}
	}
	return n
}

func (r *runningFile) add(tag string, pgid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tags[tag] = pgid
	_ = r.write()
}

func (r *runningFile) remove(tag string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.tags[tag]; ok {
		delete(r.tags, tag)
		_ = r.write()
	}
}

// write replaces the file (called with mu held, or before sharing).
func (r *runningFile) write() error {
	b, _ := json.Marshal(r.tags)
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, r.path)
}

func (r *runningFile) close() {
	os.Remove(r.path)
	os.Remove(r.path + ".lock")
	r.lock.Unlock()
}
