package eventlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// File is what the writer needs of an open file. *os.File satisfies it; a
// test can wrap it to fail a chosen write or sync.
type File interface {
	io.Writer
	io.ReaderAt
	Sync() error
	Truncate(size int64) error
	Stat() (os.FileInfo, error)
	Chmod(mode os.FileMode) error
	Fd() uintptr
	Close() error
}

// FS is the file-system seam of the log writer, snapshots and
// WriteFileAtomic: every operation whose failure matters goes through it.
// A test double embeds OS and overrides what it observes or fails.
type FS interface {
	// OpenFile opens a file as os.OpenFile does, passing flag through
	// (O_NOFOLLOW and O_EXCL included).
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	// WriteFile writes and fsyncs a whole file. eventlog no longer calls
	// it (WriteFileAtomic replaces it); it stays for implementations
	// written against it.
	WriteFile(name string, data []byte, perm os.FileMode) error
	Rename(oldpath, newpath string) error
	Remove(name string) error
	// Lstat describes a file without following a symbolic link.
	Lstat(name string) (os.FileInfo, error)
	SyncDir(dir string) error
}

// OS is the real file system.
type OS struct{}

// OpenFile opens a file with os.OpenFile.
func (OS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// WriteFile writes and fsyncs a whole file. It does not follow a symbolic
// link at name. A crash can leave the file cut short: WriteFileAtomic
// cannot.
func (OS) WriteFile(name string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|unix.O_NOFOLLOW, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Rename renames a file.
func (OS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove removes a file (a symbolic link itself, not its target).
func (OS) Remove(name string) error { return os.Remove(name) }

// Lstat describes a file without following a symbolic link.
func (OS) Lstat(name string) (os.FileInfo, error) { return os.Lstat(name) }

// SyncDir fsyncs a directory, so that a file created or renamed in it
// survives a power loss.
func (OS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// MkdirAll creates dir and any missing parents, fsyncing each parent whose
// entries changed so the new folders survive a power loss.
func MkdirAll(fsys FS, dir string) error {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(fsys, parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return fsys.SyncDir(parent)
}

// UnsafeFileError says a file apollo would write (a log, a lock, a snapshot)
// or read from its state folder is not a regular file: a symbolic link, a
// folder, a named pipe, a device — or, for a lock file, one with other hard
// links. apollo refuses it rather than write through it to another file or
// block on it. Symbolic links to folders above the file (a state folder that
// is a link) are followed as usual: only the file's own name is checked.
type UnsafeFileError struct {
	Path   string
	Reason string // "it is a symbolic link, not a regular file", …
	Err    error  // the failed open that revealed it, if any
}

func (e *UnsafeFileError) Error() string {
	return fmt.Sprintf("%s: refused: %s", e.Path, e.Reason)
}

func (e *UnsafeFileError) Unwrap() error { return e.Err }

// notRegular is the *UnsafeFileError of a file of type m at path.
func notRegular(path string, m fs.FileMode, err error) *UnsafeFileError {
	what := "something else"
	switch {
	case m&fs.ModeSymlink != 0:
		what = "a symbolic link"
	case m.IsDir():
		what = "a folder"
	case m&fs.ModeNamedPipe != 0:
		what = "a named pipe"
	case m&fs.ModeSocket != 0:
		what = "a socket"
	case m&fs.ModeDevice != 0:
		what = "a device"
	}
	return &UnsafeFileError{Path: path, Reason: "it is " + what + ", not a regular file", Err: err}
}

// StatFileType is the fs.FileMode type bits of a stat(2) mode; 0 for a
// regular file.
func StatFileType(mode uint32) fs.FileMode {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return 0
	case unix.S_IFDIR:
		return fs.ModeDir
	case unix.S_IFLNK:
		return fs.ModeSymlink
	case unix.S_IFIFO:
		return fs.ModeNamedPipe
	case unix.S_IFSOCK:
		return fs.ModeSocket
	case unix.S_IFCHR:
		return fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		return fs.ModeDevice
	}
	return fs.ModeIrregular
}

// regular returns an *UnsafeFileError unless st is a regular file's.
func regular(path string, st *unix.Stat_t) error {
	if m := StatFileType(uint32(st.Mode)); m != 0 {
		return notRegular(path, m, nil)
	}
	return nil
}

// unsafeAt explains a failed open of path (with O_NOFOLLOW): an
// *UnsafeFileError when what is there is not a regular file, else nil.
func unsafeAt(fsys FS, path string, openErr error) error {
	fi, err := fsys.Lstat(path)
	if err != nil || fi.Mode().IsRegular() {
		return nil
	}
	return notRegular(path, fi.Mode().Type(), openErr)
}

// OpenRegular opens path to read it, refusing anything but a regular file
// with an *UnsafeFileError: opened non-blocking, a named pipe planted there
// cannot hang the reader. follow says whether a symbolic link at path is
// followed (a path the user gave) or refused (one in the state folder).
func OpenRegular(path string, follow bool) (*os.File, error) {
	flag := os.O_RDONLY | unix.O_NONBLOCK
	if !follow {
		flag |= unix.O_NOFOLLOW
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		if !follow {
			if ue := unsafeAt(OS{}, path, err); ue != nil {
				return nil, ue
			}
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(path, fi.Mode().Type(), nil)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}
