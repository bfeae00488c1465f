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

	"apollo/engine/container"
	"apollo/engine/executor"
)

// runningFile records the process groups of the attempts a worker runs,
// with the tag their processes carry, and the containers of its container
// steps' attempts, in <state>/workers/<host>-<pid>.json, locked (flock)
// while the worker lives. A worker that starts ends what the unlocked files
// of dead workers name: leftover groups and containers are ended at the
// next start, as local mode ends a crashed run's processes.
type runningFile struct {
	dir   string
	path  string
	lock  *flock.Flock
	mu    sync.Mutex
	tags  map[string]int    // attempt tag → pgid
	boxes map[string]boxRef // attempt tag → its container
}

// boxRef names an attempt's container and the engine that runs it.
type boxRef struct {
	Name   string           `json:"name"`
	Engine container.Config `json:"engine"`
}

// runningState is the file's content.
type runningState struct {
	Groups     map[string]int    `json:"groups"`
	Containers map[string]boxRef `json:"containers,omitempty"`
}

// readRunning reads a worker's file: the current layout, or the earlier
// one (a map of tags to process groups).
func readRunning(b []byte) (runningState, bool) {
	var st runningState
	var keys map[string]json.RawMessage
	if json.Unmarshal(b, &keys) != nil {
		return st, false
	}
	if _, ok := keys["groups"]; ok {
		return st, json.Unmarshal(b, &st) == nil
	}
	return st, json.Unmarshal(b, &st.Groups) == nil
}

func openRunning(dir, id string) (*runningFile, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("worker: state folder: %w", err)
	}
	name := strings.NewReplacer(":", "-", "/", "-").Replace(id) + ".json"
	r := &runningFile{dir: dir, path: filepath.Join(dir, name), tags: map[string]int{}, boxes: map[string]boxRef{}}
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

// endLeftovers ends the processes and removes the containers that dead
// workers' files name, and removes the files. It returns how many processes
// it ended and the names of the containers it removed.
func (r *runningFile) endLeftovers(grace time.Duration) (int, []string) {
	var boxes []string
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
		if b, err := os.ReadFile(f); err == nil {
			if st, ok := readRunning(b); ok {
				// The containers first, through their engine, as a
				// local run does: the engine's client, which the
				// groups hold, is not the container.
				for _, box := range st.Containers {
					if box.Engine.Remove(box.Name, grace) {
						boxes = append(boxes, box.Name)
					}
				}
				for tag, pgid := range st.Groups {
					n += executor.EndLeftovers(tag, pgid, grace)
				}
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
	return n, boxes
}

// add records an attempt's process group (pgid > 0), or only its tag
// when byTag (its process does not exist yet: a restarted worker finds it
// by the tag its processes carry), and, when it runs in one, its
// container (box.Name "" for none).
func (r *runningFile) add(tag string, pgid int, byTag bool, box boxRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pgid > 0 || byTag {
		r.tags[tag] = pgid
	}
	if box.Name != "" {
		r.boxes[tag] = box
	}
	_ = r.write()
}

// remove forgets an attempt's group and container.
func (r *runningFile) remove(tag string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, p := r.tags[tag]
	_, b := r.boxes[tag]
	if p || b {
		delete(r.tags, tag)
		delete(r.boxes, tag)
		_ = r.write()
	}
}

// write replaces the file (called with mu held, or before sharing).
func (r *runningFile) write() error {
	b, _ := json.Marshal(runningState{Groups: r.tags, Containers: r.boxes})
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
