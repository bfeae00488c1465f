package eventlog

import (
	"io"
	"os"
	"path/filepath"
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

// WriteFile writes and fsyncs a whole file.
func (OS) WriteFile(name string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
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
	if err := os.Mkdir(dir, 0o755); err != nil && !os.IsExist(err) {
		return err
	}
	return fsys.SyncDir(parent)
}
