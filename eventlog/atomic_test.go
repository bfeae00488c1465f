package eventlog

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// opsFS is the real file system with a trace of WriteFileAtomic's steps; it
// fails the step named fail.
type opsFS struct {
	OS
	fail  string // "open", "write", "sync", "rename", "dirsync"
	ops   []string
	flags int // of the last OpenFile
}

var errInjected = errors.New("injected fault")

func (o *opsFS) step(op string) error {
	o.ops = append(o.ops, op)
	if op == o.fail {
		return errInjected
	}
	return nil
}

func (o *opsFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	o.flags = flag
	if err := o.step("open"); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &opsFile{File: f, fs: o}, nil
}

func (o *opsFS) Rename(oldpath, newpath string) error {
	if err := o.step("rename"); err != nil {
		return err
	}
	return os.Rename(oldpath, newpath)
}

func (o *opsFS) SyncDir(dir string) error {
	if err := o.step("dirsync"); err != nil {
		return err
	}
	return o.OS.SyncDir(dir)
}

type opsFile struct {
	*os.File
	fs *opsFS
}

func (f *opsFile) Write(b []byte) (int, error) {
	if err := f.fs.step("write"); err != nil {
		return 0, err
	}
	return f.File.Write(b)
}

func (f *opsFile) Sync() error {
	if err := f.fs.step("sync"); err != nil {
		return err
	}
	return f.File.Sync()
}

func temps(t *testing.T, path string) []string {
	t.Helper()
	m, err := filepath.Glob(TempPattern(path))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

// TestWriteFileAtomic: the steps in order, the temporary file created
// exclusively without following links, and on a fault before the rename
// the old file kept and no temporary file left.
func TestWriteFileAtomic(t *testing.T) {
	tests := []struct {
		fail    string
		wantOps []string
		want    string // path's content after
	}{
		{"", []string{"open", "write", "sync", "rename", "dirsync"}, "new"},
		{"open", []string{"open"}, "old"},
		{"write", []string{"open", "write"}, "old"},
		{"sync", []string{"open", "write", "sync"}, "old"},
		{"rename", []string{"open", "write", "sync", "rename"}, "old"},
		// The rename is done: path is new, but not known to be durable.
		{"dirsync", []string{"open", "write", "sync", "rename", "dirsync"}, "new"},
	}
	for _, tt := range tests {
		t.Run("fail "+tt.fail, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			fsys := &opsFS{fail: tt.fail}
			err := WriteFileAtomic(fsys, path, 0o644, writeString("new"))
			if (err != nil) != (tt.fail != "") || (err != nil && !errors.Is(err, errInjected)) {
				t.Errorf("WriteFileAtomic = %v, want the injected fault %q", err, tt.fail)
			}
			if err != nil && !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name %s", err, path)
			}
			if !reflect.DeepEqual(fsys.ops, tt.wantOps) {
				t.Errorf("steps %v, want %v", fsys.ops, tt.wantOps)
			}
			if want := os.O_CREATE | os.O_EXCL | unix.O_NOFOLLOW; fsys.flags&want != want {
				t.Errorf("temporary file opened with flags %#x, want O_CREATE|O_EXCL|O_NOFOLLOW", fsys.flags)
			}
			if got := string(readFile(t, path)); got != tt.want {
				t.Errorf("file holds %q, want %q", got, tt.want)
			}
			if got := temps(t, path); len(got) != 0 {
				t.Errorf("temporary files left: %v", got)
			}
		})
	}
}

// TestWriteFileAtomicWriteError: an error of write is returned, wrapped,
// and leaves the file as it was.
func TestWriteFileAtomicWriteError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := WriteFileAtomic(nil, path, 0o644, func(w io.Writer) error {
		io.WriteString(w, strings.Repeat("x", 1<<20))
		return errInjected
	})
	if !errors.Is(err, errInjected) {
		t.Errorf("WriteFileAtomic = %v, want write's error", err)
	}
	if got := string(readFile(t, path)); got != "old" {
		t.Errorf("file holds %d bytes, want the old content", len(got))
	}
	if got := temps(t, path); len(got) != 0 {
		t.Errorf("temporary files left: %v", got)
	}
}

// TestWriteFileAtomicMode: a new file gets perm less the umask; an existing
// one keeps its permission bits exactly, whatever the umask.
func TestWriteFileAtomicMode(t *testing.T) {
	old := unix.Umask(0o022)
	defer unix.Umask(old)
	dir := t.TempDir()
	path := filepath.Join(dir, "new")
	if err := WriteFileAtomic(nil, path, 0o666, writeString("x")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("new file: mode %v, %v; want -rw-r--r-- (0666 less the umask)", fi.Mode(), err)
	}
	if err := os.Chmod(path, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(nil, path, 0o600, writeString("y")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o666 {
		t.Errorf("replaced file: mode %v, %v; want its own -rw-rw-rw-", fi.Mode(), err)
	}
}

// TestWriteFileAtomicLink: a symbolic link at path is replaced, its target
// untouched (and a dangling one's never made).
func TestWriteFileAtomicLink(t *testing.T) {
	dir := t.TempDir()
	target, untouched := plantTarget(t, []byte("precious\n"))
	path := filepath.Join(dir, "file")
	mustSymlink(t, target, path)
	if err := WriteFileAtomic(nil, path, 0o644, writeString("new")); err != nil {
		t.Fatal(err)
	}
	untouched()
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("path after the write: %v, %v; want a regular file", fi, err)
	}
	if got := string(readFile(t, path)); got != "new" {
		t.Errorf("file holds %q, want %q", got, "new")
	}
}

// TestWriteFileAtomicStream: a stream (gc gzips into it) is written whole;
// writers of one path do not disturb each other.
func TestWriteFileAtomicStream(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl.gz")
	want := bytes.Repeat([]byte(`{"seq":1}`+"\n"), 100_000)
	done := make(chan error, 4)
	for range 4 {
		go func() {
			done <- WriteFileAtomic(nil, path, 0o644, func(w io.Writer) error {
				zw := gzip.NewWriter(w)
				if _, err := zw.Write(want); err != nil {
					return err
				}
				return zw.Close()
			})
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("read back %d bytes, %v; want the %d written", len(got), err, len(want))
	}
	if got := temps(t, path); len(got) != 0 {
		t.Errorf("temporary files left: %v", got)
	}
}

// TestWriteFileAtomicTempName: the temporary file is named as TempPattern
// says, and is gone once the file is written.
func TestWriteFileAtomicTempName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "file")
	if got, want := TempPattern(path), filepath.Join(filepath.Dir(path), ".file.tmp-*"); got != want {
		t.Errorf("TempPattern = %q, want %q", got, want)
	}
	var name string
	fsys := &nameFS{seen: &name}
	if err := WriteFileAtomic(fsys, path, 0o644, writeString("x")); err != nil {
		t.Fatal(err)
	}
	if ok, _ := filepath.Match(TempPattern(path), name); !ok {
		t.Errorf("temporary file %q does not match TempPattern %q", name, TempPattern(path))
	}
	if _, err := os.Lstat(name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file %s still there (%v)", name, err)
	}
}

type nameFS struct {
	OS
	seen *string
}

func (n *nameFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	*n.seen = name
	return n.OS.OpenFile(name, flag, perm)
}

func ExampleWriteFileAtomic() {
	dir, _ := os.MkdirTemp("", "example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state.json")
	err := WriteFileAtomic(OS{}, path, 0o644, func(w io.Writer) error {
		_, err := fmt.Fprintln(w, `{"done": true}`)
		return err
	})
	b, _ := os.ReadFile(path)
	fmt.Print(string(b), err)
	// Output:
	// {"done": true}
	// <nil>
}
