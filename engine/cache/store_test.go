package cache

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"apollo/eventlog"
)

var t0 = time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)

// saved writes a file of content in dir, saves it in s and returns an
// entry naming it.
func saved(t *testing.T, s *Store, dir, task, step, key, content string, created time.Time) *Entry {
	t.Helper()
	path := filepath.Join(dir, step+".out")
	if err := os.WriteFile(path, []byte(content), 0o640); err != nil {
		t.Fatal(err)
	}
	f, err := s.Save(dir, step+".out")
	if err != nil {
		t.Fatalf("Save: %v", err)
	}
	e := &Entry{Key: key, TaskName: task, Step: step, TaskID: task + "-1", Created: created,
		OutputDigest: "sha256:0", Outputs: []File{f}}
	if err := s.Put(e); err != nil {
		t.Fatalf("Put: %v", err)
	}
	return e
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	s := New(filepath.Join(dir, "state"), nil)
	e := saved(t, s, dir, "p", "make", "sha256:aa", "hello\n", t0)

	got, err := s.Get("p", "make", "sha256:aa")
	if err != nil || got == nil {
		t.Fatalf("Get = %v, %v; want the entry", got, err)
	}
	if got.TaskID != e.TaskID || len(got.Outputs) != 1 || got.Outputs[0].Size != 6 || got.Outputs[0].Mode != 0o640 {
		t.Errorf("Get = %+v, want %+v", got, e)
	}
	if got, err := s.Get("p", "make", "sha256:bb"); got != nil || err != nil {
		t.Errorf("Get(other key) = %v, %v; want nil, nil", got, err)
	}

	dst := filepath.Join(dir, "make.out")
	if changed, err := s.Restore(dir, got.Outputs[0]); changed || err != nil {
		t.Errorf("Restore(unchanged file) = %v, %v; want false, nil", changed, err)
	}
	os.Remove(dst)
	inSub := got.Outputs[0]
	inSub.Path = "sub/make.out"
	if changed, err := s.Restore(dir, inSub); !changed || err != nil {
		t.Errorf("Restore(missing file) = %v, %v; want true, nil", changed, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sub", "make.out"))
	if string(b) != "hello\n" || err != nil {
		t.Errorf("restored file = %q, %v; want %q", b, err, "hello\n")
	}
	if fi, _ := os.Stat(filepath.Join(dir, "sub", "make.out")); fi == nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("restored file's mode = %v, want 0640", fi)
	}
	os.WriteFile(dst, []byte("edited"), 0o644)
	if changed, err := s.Restore(dir, got.Outputs[0]); !changed || err != nil {
		t.Errorf("Restore(edited file) = %v, %v; want true, nil", changed, err)
	}
	if b, _ := os.ReadFile(dst); string(b) != "hello\n" {
		t.Errorf("restored file = %q, want %q", b, "hello\n")
	}
}

// A damaged blob is never restored: the file stays as it was.
func TestRestoreDamagedBlob(t *testing.T) {
	dir := t.TempDir()
	s := New(filepath.Join(dir, "state"), nil)
	e := saved(t, s, dir, "p", "make", "sha256:aa", "hello\n", t0)
	blob := s.Blob(e.Outputs[0].Digest)
	os.Chmod(blob, 0o644)
	if err := os.WriteFile(blob, []byte("hellO\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "make.out")
	os.WriteFile(dst, []byte("mine"), 0o644)
	if _, err := s.Restore(dir, e.Outputs[0]); err == nil {
		t.Fatalf("Restore(damaged blob) = nil error, want one")
	}
	if b, _ := os.ReadFile(dst); string(b) != "mine" {
		t.Errorf("file after a failed restore = %q, want %q", b, "mine")
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".make.out.tmp-*")); len(m) != 0 {
		t.Errorf("temporary files left: %v", m)
	}
	if s.Has(e.Outputs[0].Digest) {
		t.Errorf("the damaged blob is still there; want it removed, to be saved again")
	}
	os.WriteFile(filepath.Join(dir, "make.out"), []byte("hello\n"), 0o644)
	if _, err := s.Save(dir, "make.out"); err != nil {
		t.Fatalf("Save after the damage: %v", err)
	}
	again := e.Outputs[0]
	again.Path = "again.out"
	if changed, err := s.Restore(dir, again); !changed || err != nil {
		t.Errorf("Restore after the blob was saved again = %v, %v; want true, nil", changed, err)
	}
}

// Save and Restore keep to the files of the step's folder: a path that
// leaves it, a symbolic link, or a file under a linked folder is refused,
// and nothing is read or written through it.
func TestOutsideRefused(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "ws")
	outside := filepath.Join(dir, "outside")
	os.MkdirAll(root, 0o755)
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "secret"), []byte("outside\n"), 0o644)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "link.out"))
	os.Symlink(outside, filepath.Join(root, "linked"))
	os.WriteFile(filepath.Join(root, "ok.out"), []byte("ok\n"), 0o644)
	s := New(filepath.Join(dir, "state"), nil)

	for _, rel := range []string{"link.out", "linked/secret", "../outside/secret", filepath.Join(outside, "secret")} {
		if f, err := s.Save(root, rel); err == nil {
			t.Errorf("Save(%q) = %+v, nil; want an error", rel, f)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "state", "cache", "blobs", "*")); len(m) != 0 {
		t.Errorf("blobs saved from refused outputs: %v", m)
	}

	f, err := s.Save(root, "ok.out")
	if err != nil {
		t.Fatalf("Save(ok.out): %v", err)
	}
	for _, rel := range []string{"link.out", "linked/x.out", "../outside/x.out", filepath.Join(outside, "x.out")} {
		g := f
		g.Path = rel
		if changed, err := s.Restore(root, g); changed || err == nil {
			t.Errorf("Restore(%q) = %v, %v; want false and an error", rel, changed, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "outside\n" {
		t.Errorf("the file outside = %q, want it unchanged", b)
	}
	if _, err := os.Lstat(filepath.Join(outside, "x.out")); err == nil {
		t.Errorf("a restore wrote %s", filepath.Join(outside, "x.out"))
	}
	if fi, _ := os.Lstat(filepath.Join(root, "link.out")); fi == nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Errorf("link.out after a refused restore = %v, want the link left alone", fi)
	}
}

// A digest is sha256:<64 hex digits>: an edited entry whose digest is a
// path (sha256:../../victim) neither reads nor removes the file it names.
func TestDigestNotAPath(t *testing.T) {
	dir := t.TempDir()
	s := New(filepath.Join(dir, "state"), nil)
	e := saved(t, s, dir, "p", "make", "sha256:aa", "hello\n", t0)
	victim := filepath.Join(dir, "victim")
	os.WriteFile(victim, []byte("keep\n"), 0o644)
	f := e.Outputs[0]
	f.Digest = "sha256:../../../victim"
	f.Path = "again.out"
	if s.Has(f.Digest) {
		t.Errorf("Has(%q) = true, want false", f.Digest)
	}
	if changed, err := s.Restore(dir, f); changed || err == nil {
		t.Errorf("Restore(digest %q) = %v, %v; want false and an error", f.Digest, changed, err)
	}
	if b, err := os.ReadFile(victim); string(b) != "keep\n" || err != nil {
		t.Errorf("victim after the restore = %q, %v; want it kept", b, err)
	}
	e.Outputs[0].Digest = f.Digest
	if err := s.Put(e); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get("p", "make", "sha256:aa"); got != nil || err == nil {
		t.Errorf("Get(entry with a bad digest) = %v, %v; want nil and an error", got, err)
	}
}

// A restored file gets its entry's permission bits only: an edited entry
// cannot make a setuid file.
func TestRestoreModePermOnly(t *testing.T) {
	dir := t.TempDir()
	s := New(filepath.Join(dir, "state"), nil)
	e := saved(t, s, dir, "p", "make", "sha256:aa", "hello\n", t0)
	f := e.Outputs[0]
	f.Mode = fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky | 0o750
	f.Path = "again.out"
	if changed, err := s.Restore(dir, f); !changed || err != nil {
		t.Fatalf("Restore = %v, %v; want true, nil", changed, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "again.out"))
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode() &^ fs.ModePerm; got != 0 {
		t.Errorf("restored file's mode = %v, want permission bits only", fi.Mode())
	}
}

func TestLatest(t *testing.T) {
	dir := t.TempDir()
	s := New(filepath.Join(dir, "state"), nil)
	if e, err := s.Latest("p", "make"); e != nil || err != nil {
		t.Fatalf("Latest(empty store) = %v, %v; want nil, nil", e, err)
	}
	saved(t, s, dir, "p", "make", "sha256:01", "a", t0)
	saved(t, s, dir, "p", "make", "sha256:02", "b", t0.Add(time.Hour))
	saved(t, s, dir, "p", "make", "sha256:03", "c", t0.Add(-time.Hour))
	e, err := s.Latest("p", "make")
	if err != nil || e == nil || e.Key != "sha256:02" {
		t.Errorf("Latest = %v, %v; want the entry sha256:02", e, err)
	}
}

// failRename fails every rename: a crash before an entry's rename.
type failRename struct{ eventlog.OS }

func (failRename) Rename(string, string) error { return errors.New("injected") }

// An entry is written whole or not at all.
func TestPutFails(t *testing.T) {
	dir := t.TempDir()
	s := New(filepath.Join(dir, "state"), failRename{})
	e := &Entry{Key: "sha256:aa", TaskName: "p", Step: "make", Created: t0}
	if err := s.Put(e); err == nil {
		t.Fatal("Put with failing renames = nil error, want one")
	}
	if got, err := New(filepath.Join(dir, "state"), nil).Get("p", "make", "sha256:aa"); got != nil || err != nil {
		t.Errorf("Get after a failed Put = %v, %v; want nil, nil", got, err)
	}
	if entries, bad := s.List(); len(entries) != 0 || len(bad) != 0 {
		t.Errorf("List after a failed Put = %v, %v; want nothing", entries, bad)
	}
}

func TestGC(t *testing.T) {
	tests := []struct {
		name          string
		opts          GCOptions
		removed, kept int
		blobs         int
		broken        int
	}{
		{name: "default: only what no run can use", opts: GCOptions{}, removed: 0, kept: 2, blobs: 1, broken: 1},
		{name: "all", opts: GCOptions{All: true}, removed: 3, kept: 0, blobs: 3},
		{name: "older than", opts: GCOptions{OlderThan: 2 * time.Hour}, removed: 1, kept: 1, blobs: 2, broken: 1},
		{name: "one pipeline", opts: GCOptions{All: true, TaskName: "q"}, removed: 1, kept: 2, blobs: 1},
		{name: "dry run", opts: GCOptions{All: true, DryRun: true}, removed: 3, kept: 0, blobs: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := New(filepath.Join(dir, "state"), nil)
			saved(t, s, dir, "p", "old", "sha256:01", "old", t0.Add(-3*time.Hour))
			saved(t, s, dir, "p", "new", "sha256:02", "new", t0)
			broken := saved(t, s, dir, "q", "gone", "sha256:03", "gone", t0)
			os.Remove(s.Blob(broken.Outputs[0].Digest))
			// A blob no entry names.
			os.WriteFile(filepath.Join(s.Root, "blobs", "0123"), []byte("orphan"), 0o644)

			o := tt.opts
			o.Now = t0
			res, err := s.GC(o)
			if err != nil {
				t.Fatalf("GC: %v", err)
			}
			if len(res.Entries) != tt.removed || res.Kept != tt.kept || res.Blobs != tt.blobs || len(res.Broken) != tt.broken {
				t.Errorf("GC(%+v) = removed %d, kept %d, blobs %d, broken %v; want %d, %d, %d, %d",
					tt.opts, len(res.Entries), res.Kept, res.Blobs, res.Broken, tt.removed, tt.kept, tt.blobs, tt.broken)
			}
			left, _ := s.List()
			want := 3 - tt.removed - tt.broken
			if tt.opts.DryRun {
				want = 3
			}
			if len(left) != want {
				t.Errorf("entries left = %d, want %d", len(left), want)
			}
			for _, e := range left {
				if !tt.opts.DryRun && !s.whole(e) {
					t.Errorf("entry %s left without its blobs", e.File)
				}
			}
		})
	}
}

// An entry file that cannot be parsed, or is of another format, is
// reported broken and removed by gc.
func TestGCRemovesUnreadableEntries(t *testing.T) {
	tests := []struct{ name, content, msg string }{
		{name: "not JSON", content: "{", msg: ": unexpected end of JSON input"},
		{name: "other format", content: `{"v": 99}`, msg: ": format 99, not 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := New(filepath.Join(dir, "state"), nil)
			e := saved(t, s, dir, "p", "make", "sha256:aa", "hello\n", t0)
			saved(t, s, dir, "p", "keep", "sha256:bb", "kept\n", t0)
			if err := os.WriteFile(e.File, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := s.Get("p", "make", "sha256:aa")
			if want := "cache entry " + e.File + tt.msg; err == nil || err.Error() != want {
				t.Errorf("Get(unreadable entry) error = %v, want %q", err, want)
			}

			res, err := s.GC(GCOptions{Now: t0})
			if err != nil {
				t.Fatalf("GC: %v", err)
			}
			if len(res.Broken) != 1 || res.Broken[0] != e.File {
				t.Errorf("GC broken = %q, want [%q]", res.Broken, e.File)
			}
			if _, err := os.Stat(e.File); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the unreadable entry file is still there (%v); want it removed", err)
			}
			if res.Kept != 1 || res.Blobs != 1 {
				t.Errorf("GC = kept %d, blobs %d; want 1, 1", res.Kept, res.Blobs)
			}
			if left, bad := s.List(); len(left) != 1 || len(bad) != 0 {
				t.Errorf("List after GC = %v, %v; want the one readable entry", left, bad)
			}
		})
	}
}

// TestGCCrashTemps checks that gc removes the temporary entry files a
// crash left (an hour old or more) with the folders they kept, keeps a
// younger one, and with --pipeline touches only that pipeline's files.
func TestGCCrashTemps(t *testing.T) {
	dir := t.TempDir()
	s := New(filepath.Join(dir, "state"), nil)
	e := saved(t, s, dir, "p", "make", "sha256:aa", "hello\n", t0)
	stepDir := filepath.Dir(e.File)
	old := filepath.Join(stepDir, ".bb.json.tmp-1")
	young := filepath.Join(stepDir, ".cc.json.tmp-2")
	otherDir := filepath.Join(s.Root, "entries", "q", "make")
	other := filepath.Join(otherDir, ".dd.json.tmp-3")
	for _, f := range []string{old, young, other} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(`{"v"`), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{old, other} {
		if err := os.Chtimes(f, t0.Add(-2*time.Hour), t0.Add(-2*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chtimes(young, t0, t0); err != nil {
		t.Fatal(err)
	}

	res, err := s.GC(GCOptions{All: true, TaskName: "p", Now: t0})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if len(res.Broken) != 1 || res.Broken[0] != old {
		t.Errorf("GC --pipeline p broken = %q, want [%q]", res.Broken, old)
	}
	for _, f := range []string{old, e.File} {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s is still there (%v); want it removed", f, err)
		}
	}
	for _, f := range []string{young, other} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s: %v; want it kept", f, err)
		}
	}

	res, err = s.GC(GCOptions{Now: t0})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	if len(res.Broken) != 1 || res.Broken[0] != other {
		t.Errorf("GC broken = %q, want [%q]", res.Broken, other)
	}
	if _, err := os.Stat(filepath.Dir(otherDir)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("pipeline folder %s is still there (%v); want it removed once empty", filepath.Dir(otherDir), err)
	}
}

func TestNameFor(t *testing.T) {
	tests := []struct{ in, want string }{
		{"make", "make"},
		{"convert[eu,x]", "convert[eu,x]"},
		{"a.b", "a.b"},
		{"..", "%2E%2E"},
		{".", "%2E"},
		{"a/b c", "a%2Fb%20c"},
	}
	for _, tt := range tests {
		if got := nameFor(tt.in); got != tt.want {
			t.Errorf("nameFor(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
