package worker

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAttemptFolders: an attempt's folder is kept, emptied, for the next
// one, up to one per slot; one removed meanwhile is made again.
func TestAttemptFolders(t *testing.T) {
	f := &attemptFolders{dir: t.TempDir(), owner: "host-1", keep: 1}
	a, err := f.take()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(filepath.Base(a), "attempt-host-1-") {
		t.Errorf("the folder %s is not named after its worker", a)
	}
	b, err := f.take()
	if err != nil || b == a {
		t.Fatalf("a second attempt got %q (%v) while the first holds %q", b, err, a)
	}
	os.WriteFile(filepath.Join(a, "output.log"), []byte("secret output\n"), 0o644)
	os.MkdirAll(filepath.Join(a, "sub", "deeper"), 0o755)
	f.put(a)
	f.put(b) // one more than it keeps: removed
	if _, err := os.Stat(b); !os.IsNotExist(err) {
		t.Errorf("a folder beyond the one kept is still there (%v)", err)
	}
	again, err := f.take()
	if err != nil || again != a {
		t.Fatalf("the next attempt got %q (%v), want the kept %q", again, err, a)
	}
	if entries, _ := os.ReadDir(again); len(entries) != 0 {
		t.Errorf("the kept folder still holds %d entries of the attempt before", len(entries))
	}
	f.put(again)
	os.RemoveAll(a)
	gone, err := f.take()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(gone); err != nil || !fi.IsDir() {
		t.Errorf("a kept folder removed meanwhile was not made again: %v", err)
	}
	f.put(gone)
	f.close()
	if entries, _ := os.ReadDir(f.dir); len(entries) != 0 {
		t.Errorf("after close the workers' folder holds %d entries", len(entries))
	}
}

// TestLeftoverFolders: a worker that starts removes the attempt folders of
// dead workers, keeps those of live ones however old, and removes a folder
// of an older apollo, named after no worker, once it is an hour old.
func TestLeftoverFolders(t *testing.T) {
	dir := t.TempDir()
	live := mustOpenRunning(t, dir, "live:1")
	me := mustOpenRunning(t, dir, "me:2")
	old := time.Now().Add(-2 * time.Hour)
	folder := func(name string, mtime time.Time) string {
		p := filepath.Join(dir, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(p, mtime, mtime)
		return p
	}
	liveOld := folder("attempt-"+live.name()+"-111", old)
	mine := folder("attempt-"+me.name()+"-222", old)
	dead := folder("attempt-dead-3-333", time.Now())
	legacyOld := folder("attempt-444", old)
	legacyNew := folder("attempt-555", time.Now())
	me.endLeftovers(time.Second)
	for _, c := range []struct {
		path string
		kept bool
	}{{liveOld, true}, {mine, true}, {dead, false}, {legacyOld, false}, {legacyNew, true}} {
		_, err := os.Stat(c.path)
		if kept := err == nil; kept != c.kept {
			t.Errorf("%s: kept %v, want %v", filepath.Base(c.path), kept, c.kept)
		}
	}
}
