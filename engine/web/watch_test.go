package web

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatcher: a file written in a watched folder is reported as a change
// of that folder and entry, a second folder added while changes are read
// is watched too, and close ends the changes at once (serve stops its
// watcher when it stops). A page may ask for a folder while serve stops:
// adding one while the watcher closes is an error at worst, and under
// -race it is checked for data races (a hand-written inotify watcher read
// its descriptor while close cleared it).
func TestWatcher(t *testing.T) {
	w, err := newWatcher()
	if err != nil {
		t.Fatal(err)
	}
	logs, out := t.TempDir(), t.TempDir()
	if err := w.add(logs); err != nil {
		t.Fatal(err)
	}
	write := func(dir, name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	await := func(dir, name string) {
		t.Helper()
		deadline := time.After(10 * time.Second) // the poller looks once a second
		for {
			select {
			case c, ok := <-w.changes():
				if !ok {
					t.Fatalf("the changes ended before %s in %s was reported", name, dir)
				}
				if c.dir == dir && c.name == name {
					return
				}
			case <-deadline:
				t.Fatalf("no change reported for %s in %s within 10 s", name, dir)
			}
		}
	}
	write(logs, "task_a_1.jsonl")
	await(logs, "task_a_1.jsonl")
	if err := w.add(out); err != nil {
		t.Fatal(err)
	}
	write(out, "step.0.out")
	await(out, "step.0.out")
	if err := w.add(filepath.Join(logs, "missing")); err == nil {
		t.Error("watching a folder that does not exist: no error")
	}

	adding := make(chan struct{})
	go func() {
		defer close(adding)
		for range 200 {
			_ = w.add(out)
		}
	}()
	if err := w.close(); err != nil {
		t.Fatal(err)
	}
	<-adding
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-w.changes():
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the changes did not end within 5 s of close")
		}
	}
}
