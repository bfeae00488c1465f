package cron

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/fsnotify/fsnotify"

	"apollo/engine/pipeline"
)

// File triggers: apollo serve watches the folder of each file: glob with
// fsnotify and, where a watch cannot be had (a folder not there yet, a
// file system without events, too many watches), by looking every second.
// A matching regular file starts one run once its size and modification
// time have stayed the same for the trigger's settle time; its path, size
// and modification time are the decision's key, so the same file unchanged
// never starts a second run, and a changed one starts another.

const (
	// pollBusy is how often the folders are read while a file settles or
	// a folder has no watch; pollIdle, with every watch in place, catches
	// what events missed (an overflowed queue).
	pollBusy = time.Second
	pollIdle = 30 * time.Second
	// maxFilesPerTrigger bounds the files one scan considers per trigger.
	maxFilesPerTrigger = 10_000
)

// fileSeen is a matching file not yet decided: what it was when it was
// first seen so, and since when.
type fileSeen struct {
	size  int64
	mtime int64
	since time.Time
}

// fileWatch is the state of the file triggers' watcher.
type fileWatch struct {
	w       *fsnotify.Watcher // nil: polling only
	watched map[string]bool   // folders with a watch
	pending map[string]*fileSeen
	polling bool // some folder has no watch
}

// watchFiles runs the file triggers until ctx is done.
func (s *Scheduler) watchFiles(ctx context.Context) {
	fw := &fileWatch{watched: map[string]bool{}, pending: map[string]*fileSeen{}}
	if w, err := fsnotify.NewWatcher(); err == nil {
		fw.w = w
		defer w.Close()
	} else {
		s.opts.Logf("apollo serve: file triggers: no file system events (%v); folders are read every %s", err, pollBusy)
	}
	var events chan fsnotify.Event
	var errs chan error
	if fw.w != nil {
		events, errs = fw.w.Events, fw.w.Errors
	}
	for {
		s.scanFiles(fw)
		wait := pollIdle
		if len(fw.pending) > 0 || fw.polling || fw.w == nil {
			wait = pollBusy
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-events:
		case err := <-errs:
			if err != nil {
				s.opts.Logf("apollo serve: file triggers: %v", err)
			}
		case <-t.C:
		}
		t.Stop()
	}
}

// fileTrigger is one file: trigger of a pipeline.
type fileTrigger struct {
	pipe Pipe
	t    pipeline.Trigger
}

// fileTriggers lists the pipelines' file: triggers.
func (s *Scheduler) fileTriggers() []fileTrigger {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []fileTrigger
	for _, rel := range slices.Sorted(maps.Keys(s.pipes)) {
		p := s.pipes[rel].pipe
		for _, t := range p.Triggers {
			if t.Kind == pipeline.TriggerFile {
				out = append(out, fileTrigger{p, t})
			}
		}
	}
	return out
}

// scanFiles reads the folder of each file trigger, watching it if it can,
// and fires for each settled file not decided yet.
func (s *Scheduler) scanFiles(fw *fileWatch) {
	now := s.opts.Clock.Now()
	seen := map[string]bool{}
	fw.polling = false
	for _, ft := range s.fileTriggers() {
		dir, pattern := filepath.Split(ft.t.Glob)
		dir = filepath.Clean(dir)
		if fw.w != nil && !fw.watched[dir] {
			if err := fw.w.Add(dir); err == nil {
				fw.watched[dir] = true
			}
		}
		if !fw.watched[dir] {
			fw.polling = true
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		n := 0
		for _, de := range entries {
			if ok, _ := filepath.Match(pattern, de.Name()); !ok || !de.Type().IsRegular() {
				continue
			}
			if n++; n > maxFilesPerTrigger {
				break
			}
			fi, err := de.Info()
			if err != nil {
				continue
			}
			path := filepath.Join(dir, de.Name())
			mtime := fi.ModTime().UnixNano()
			key := fmt.Sprintf("file:%s:%d:%d", path, fi.Size(), mtime)
			pk := firedKey(ft.pipe.Rel, path)
			if s.Fired(ft.pipe.Rel, key) {
				continue
			}
			seen[pk] = true
			p := fw.pending[pk]
			if p == nil || p.size != fi.Size() || p.mtime != mtime {
				p = &fileSeen{size: fi.Size(), mtime: mtime, since: now} // new, or still being written
				fw.pending[pk] = p
			}
			if now.Sub(p.since) < ft.t.Settle {
				continue
			}
			s.mu.Lock()
			s.fireTrigger(ft.pipe, TriggerFile, key, "file "+path,
				map[string]string{"trigger.kind": TriggerFile, "trigger.path": path})
			s.mu.Unlock()
			delete(fw.pending, pk)
			delete(seen, pk)
		}
	}
	for pk := range fw.pending {
		if !seen[pk] {
			delete(fw.pending, pk)
		}
	}
}
