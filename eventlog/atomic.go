package eventlog

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// WriteFileAtomic replaces the file at path with what write writes, so that
// whatever happens — an error, a crash, a power loss — path holds either its
// old content or all of the new one, never a part or a mix. It is apollo's
// one way to write a whole file: the log's first record, snapshots, torn
// tails' side files, and for callers outside this package idem's writes and
// gc's archives. Its steps, each through fsys so that fault-injection and
// crash tests see them:
//
//  1. create a temporary file in path's folder, named as TempPattern(path)
//     says, exclusively (O_CREATE|O_EXCL|O_NOFOLLOW): it never opens a file
//     that exists, nor follows a symbolic link planted under its name;
//  2. call write with a buffered writer on it, then flush the buffer (write
//     need not buffer or flush; a stream such as a gzip.Writer must be
//     closed inside write, so that all of it is written);
//  3. fsync the file (on macOS an F_FULLFSYNC, see datasync);
//  4. rename it over path: a symbolic link at path is replaced, its target
//     never touched;
//  5. fsync the folder, so that the rename survives a power loss.
//
// A new file gets perm less the umask; a path that is already a regular file
// keeps its permission bits exactly. path's folder must exist (MkdirAll
// makes one durably). On an error before the rename the temporary file is
// removed and path is as it was; an error from the folder's fsync comes
// after the rename, so path may hold the new content, but it is not known to
// survive a power loss.
//
// Writers of one path need not be serialised: each has its own temporary
// file, and the last rename wins. A crash can leave a temporary file
// behind; only a caller that knows no other writer of path runs (it holds
// the task lock) may remove the files TempPattern matches.
func WriteFileAtomic(fsys FS, path string, perm os.FileMode, write func(io.Writer) error) error {
	if fsys == nil {
		fsys = OS{}
	}
	keep := false
	if fi, err := fsys.Lstat(path); err == nil && fi.Mode().IsRegular() {
		perm, keep = fi.Mode().Perm(), true
	}
	tmp, f, err := createTemp(fsys, path, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fill(f, keep, perm, write); err != nil {
		f.Close()
		fsys.Remove(tmp) // a big file's half is not worth keeping
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
		return fmt.Errorf("write %s: sync folder: %w", path, err)
	}
	return nil
}

// fill writes the temporary file f, fsyncs and closes it.
func fill(f File, keep bool, perm os.FileMode, write func(io.Writer) error) error {
	if keep {
		if err := f.Chmod(perm); err != nil {
			return err
		}
	}
	bw := bufio.NewWriterSize(f, 64<<10)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return f.Close()
}

// TempPattern is the filepath.Match pattern of the temporary files
// WriteFileAtomic makes for path: ".<name>.tmp-*" in path's folder, hidden
// from ls and from every listing apollo makes. Metacharacters in path act as
// such, so a pattern for many files can be given (logs/task_x_*.jsonl).
func TempPattern(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
}

// createTemp creates a temporary file for path, exclusively, under a random
// name; a name taken by a file or a link is skipped, never opened.
func createTemp(fsys FS, path string, perm os.FileMode) (string, File, error) {
	prefix := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	for tries := 0; ; tries++ {
		name := fmt.Sprintf("%s%016x", prefix, rand.Uint64())
		f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, perm)
		if err == nil {
			return name, f, nil
		}
		if !errors.Is(err, fs.ErrExist) || tries == 10 {
			return "", nil, err
		}
	}
}
