package stdlib

import (
	"os"

	"apollo/eventlog"
)

// rootFS is the event log's file-system seam over an os.Root, so that idem's
// writes go through eventlog.WriteFileAtomic, apollo's one atomic write,
// without leaving the folder the root confines them to.
type rootFS struct{ r *os.Root }

func (f rootFS) OpenFile(name string, flag int, perm os.FileMode) (eventlog.File, error) {
	file, err := f.r.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return file, nil
}

func (f rootFS) WriteFile(name string, data []byte, perm os.FileMode) error {
	return f.r.WriteFile(name, data, perm)
}

func (f rootFS) Rename(oldpath, newpath string) error   { return f.r.Rename(oldpath, newpath) }
func (f rootFS) Remove(name string) error               { return f.r.Remove(name) }
func (f rootFS) Lstat(name string) (os.FileInfo, error) { return f.r.Lstat(name) }
func (f rootFS) SyncDir(dir string) error               { return syncDir(f.r, dir) }
