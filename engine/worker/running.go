package worker

import (
	"bytes"
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
//
// The file is a journal: one JSON line per attempt added or removed,
// appended with one write each, which a process crash cannot tear (the
// kernel completes a write it has begun). Rewriting the whole file and
// renaming it into place, twice an attempt, made the file system allocate
// and free an inode each time: a third of a busy worker's CPU. The journal
// is compacted, by that rewrite, once it holds many more lines than
// attempts.
type runningFile struct {
	dir   string
	path  string
	lock  *flock.Flock
	mu    sync.Mutex
	f     *os.File          // the journal, appended to
	lines int               // lines in the journal
	tags  map[string]int    // attempt tag → pgid
	boxes map[string]boxRef // attempt tag → its container
}

// boxRef names an attempt's container and the engine that runs it.
type boxRef struct {
	Name   string           `json:"name"`
	Engine container.Config `json:"engine"`
}

// runningState is what a running file says is running.
type runningState struct {
	Groups     map[string]int    `json:"groups"`
	Containers map[string]boxRef `json:"containers,omitempty"`
}

// runningLine is one line of the journal: an attempt added, with its
// group (0 when it is found by its tag alone) and its container if any (a
// container's attempt with no group has none), or removed.
type runningLine struct {
	Op        string  `json:"op"` // "add" or "remove"
	Tag       string  `json:"tag"`
	PGID      int     `json:"pgid,omitempty"`
	Container *boxRef `json:"container,omitempty"`
}

// compactAfter is how many more lines than running attempts the journal
// may hold before it is rewritten.
const compactAfter = 512

// readRunning reads a worker's file: the journal, or an earlier layout (one
// JSON object with the groups and containers, or before that a map of tags
// to process groups). A line that does not parse is skipped: only the last
// can be cut short, by a machine that stopped mid-write, and the attempt it
// added had not been released.
func readRunning(b []byte) (runningState, bool) {
	st := runningState{Groups: map[string]int{}, Containers: map[string]boxRef{}}
	first, _, _ := bytes.Cut(bytes.TrimSpace(b), []byte("\n"))
	if len(first) == 0 {
		return st, true // a journal nothing was written to yet
	}
	var head runningLine
	if json.Unmarshal(first, &head) == nil && head.Op != "" {
		for line := range bytes.Lines(b) {
			var l runningLine
			if json.Unmarshal(line, &l) != nil {
				continue
			}
			switch l.Op {
			case "add":
				if l.PGID > 0 || l.Container == nil { // a container's attempt may have no group
					st.Groups[l.Tag] = l.PGID
				}
				if l.Container != nil {
					st.Containers[l.Tag] = *l.Container
				}
			case "remove":
				delete(st.Groups, l.Tag)
				delete(st.Containers, l.Tag)
			}
		}
		return st, true
	}
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
	if err := r.rewrite(); err != nil {
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
	// Attempt folders of dead workers: named after their worker's file
	// (attemptFolders), whose lock says whether it lives; a folder of an
	// older apollo, named after no worker, once it is an hour old.
	dirs, _ := filepath.Glob(filepath.Join(r.dir, folderPrefix+"*"))
	for _, d := range dirs {
		if owner := folderOwner(filepath.Base(d)); owner != "" {
			if owner != r.name() && !lockedByLiveWorker(filepath.Join(r.dir, owner+".json.lock")) {
				os.RemoveAll(d)
			}
			continue
		}
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
	if pgid <= 0 && !byTag && box.Name == "" {
		return // nothing to find it by
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := runningLine{Op: "add", Tag: tag}
	if pgid > 0 || byTag {
		r.tags[tag], l.PGID = pgid, pgid
	}
	if box.Name != "" {
		r.boxes[tag], l.Container = box, &box
	}
	r.append(l)
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
		r.append(runningLine{Op: "remove", Tag: tag})
	}
}

// append writes one line to the journal, or rewrites the journal when it
// has grown long or the line could not be written (called with mu held).
func (r *runningFile) append(l runningLine) {
	b, _ := json.Marshal(l)
	if r.f != nil && r.lines < len(r.tags)+len(r.boxes)+compactAfter {
		if _, err := r.f.Write(append(b, '\n')); err == nil {
			r.lines++
			return
		}
	}
	_ = r.rewrite()
}

// rewrite replaces the journal by one that adds what is running now, and
// reopens it for appending (called with mu held, or before sharing).
func (r *runningFile) rewrite() error {
	var buf bytes.Buffer
	lines := 0
	add := func(tag string) {
		l := runningLine{Op: "add", Tag: tag, PGID: r.tags[tag]}
		if box, ok := r.boxes[tag]; ok {
			l.Container = &box
		}
		b, _ := json.Marshal(l)
		buf.Write(append(b, '\n'))
		lines++
	}
	for tag := range r.tags {
		add(tag)
	}
	for tag := range r.boxes {
		if _, ok := r.tags[tag]; !ok {
			add(tag)
		}
	}
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("worker: write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, r.path); err != nil {
		return fmt.Errorf("worker: replace %s: %w", r.path, err)
	}
	f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("worker: open %s: %w", r.path, err)
	}
	if r.f != nil {
		r.f.Close()
	}
	r.f, r.lines = f, lines
	return nil
}

// name is the worker's name in its state folder: its file's, without
// ".json".
func (r *runningFile) name() string { return strings.TrimSuffix(filepath.Base(r.path), ".json") }

// lockedByLiveWorker reports whether a worker holds the lock file path.
func lockedByLiveWorker(path string) bool {
	if _, err := os.Stat(path); err != nil {
		return false
	}
	l := flock.New(path)
	ok, err := l.TryLock()
	if err != nil || !ok {
		return true
	}
	l.Unlock()
	return false
}

func (r *runningFile) close() {
	if r.f != nil {
		r.f.Close()
	}
	os.Remove(r.path)
	os.Remove(r.path + ".lock")
	r.lock.Unlock()
}
