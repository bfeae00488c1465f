package worker

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// folderPrefix begins the name of every attempt folder: a worker's are
// folderPrefix + <worker> + "-" + <digits> (folderOwner reads the worker
// back); an older apollo's, folderPrefix + <digits>.
const folderPrefix = "attempt-"

// attemptFolders hands each attempt a folder of its own under the workers'
// state folder (its output file and $APOLLO_OUTPUT), and keeps a folder an
// attempt has left, emptied, for the next: making and removing a folder
// per attempt had the file system allocate and free an inode each time, a
// tenth of a busy worker's CPU. It keeps at most one folder per slot.
type attemptFolders struct {
	dir   string // <state>/workers
	owner string // the worker's name there (runningFile.name): a folder is attempt-<owner>-<digits>
	keep  int    // most folders kept
	mu    sync.Mutex
	free  []string
}

// take returns an empty folder for an attempt. A kept folder that is gone
// (removed by hand) is made again.
func (f *attemptFolders) take() (string, error) {
	f.mu.Lock()
	var dir string
	if n := len(f.free); n > 0 {
		dir, f.free = f.free[n-1], f.free[:n-1]
	}
	f.mu.Unlock()
	if dir == "" {
		return os.MkdirTemp(f.dir, folderPrefix+f.owner+"-")
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	return dir, nil
}

// put empties an attempt's folder and keeps it, or removes it when it
// cannot be emptied or enough are kept.
func (f *attemptFolders) put(dir string) {
	entries, err := os.ReadDir(dir)
	for _, e := range entries {
		if err == nil {
			err = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
	f.mu.Lock()
	kept := err == nil && len(f.free) < f.keep
	if kept {
		f.free = append(f.free, dir)
	}
	f.mu.Unlock()
	if !kept {
		os.RemoveAll(dir)
	}
}

// close removes the folders kept.
func (f *attemptFolders) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, dir := range f.free {
		os.RemoveAll(dir)
	}
	f.free = nil
}

// folderOwner is the name of the worker whose attempt folder base is
// (folderPrefix + "<worker>-<digits>"), or "" for a folder named after none.
func folderOwner(base string) string {
	rest := strings.TrimPrefix(base, folderPrefix)
	if i := strings.LastIndexByte(rest, '-'); i > 0 {
		return rest[:i]
	}
	return ""
}
