package stdlib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

// Size limits of the helpers that read a whole file or folder: a script gets a clear error
// rather than a step that runs out of time or memory.
const (
	// MaxReadBytes is the largest file fs.read returns.
	MaxReadBytes = 64 << 20
	// MaxReplaceBytes is the largest file idem.replace rewrites.
	MaxReplaceBytes = 1 << 30
	// MaxLineBytes is the longest line idem.replace reads.
	MaxLineBytes = 64 << 20
	// MaxListNames is the most names fs.list returns.
	MaxListNames = 1 << 20
)

var errIsFolder = errors.New("is a folder")

// notRegularError is a script's path naming something other than a regular file where a
// helper reads or writes one: a folder, a symbolic link (for writes), a FIFO, a socket, a
// device. apollo never opens such a file for reading or writing, since a FIFO would block
// the step and a device would never end.
type notRegularError struct {
	mode fs.FileMode
	hint string // for a folder: what to use instead, " (use fs.list)"
}

func (e *notRegularError) Error() string {
	t := e.mode.Type()
	switch {
	case t&fs.ModeDir != 0:
		return "is a folder" + e.hint
	case t&fs.ModeSymlink != 0:
		return "is a symbolic link, which apollo does not write through or replace"
	case t&fs.ModeNamedPipe != 0:
		return "is a named pipe (FIFO), not a regular file"
	case t&fs.ModeSocket != 0:
		return "is a socket, not a regular file"
	case t&fs.ModeCharDevice != 0:
		return "is a character device, not a regular file"
	case t&fs.ModeDevice != 0:
		return "is a block device, not a regular file"
	}
	return "is not a regular file"
}

// checkRegular returns a *notRegularError for fi unless it is a regular file.
func checkRegular(rel string, fi fs.FileInfo, hint string) error {
	if fi.Mode().IsRegular() {
		return nil
	}
	return &fs.PathError{Op: "open", Path: rel, Err: &notRegularError{mode: fi.Mode(), hint: hint}}
}

// openRead opens file rel of r for reading. Links that stay in the area are followed
// (os.Root refuses the others), but only a regular file is opened: the type is checked
// before (so a device is not even opened) and, on the opened descriptor, after (a FIFO
// swapped in meanwhile is opened non-blocking, so it cannot hold the step, and closed
// unread). hint is added to the error for a folder.
func openRead(r *os.Root, rel, hint string) (*os.File, fs.FileInfo, error) {
	fi, err := r.Stat(rel)
	if err != nil {
		return nil, nil, err
	}
	if err := checkRegular(rel, fi, hint); err != nil {
		return nil, nil, err
	}
	f, err := r.OpenFile(rel, os.O_RDONLY|openNonblock, 0)
	if err != nil {
		return nil, nil, err
	}
	if fi, err = f.Stat(); err == nil {
		err = checkRegular(rel, fi, hint)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

// openDir opens folder rel of r (links that stay in the area are followed). O_DIRECTORY
// makes a FIFO in the way an error rather than an open that waits.
func openDir(r *os.Root, rel string) (*os.File, error) {
	if rel == "" {
		rel = "."
	}
	return r.OpenFile(rel, os.O_RDONLY|openFolder, 0)
}

// lockName is the sidecar lock file of rel: ".<name>.lock" beside it.
func lockName(rel string) string {
	dir, name := filepath.Split(rel)
	return filepath.Join(dir, "."+name+".lock")
}

// lockBeside serialises the writers of file rel of r: it takes an exclusive flock on the
// sidecar lockName(rel), waiting while another holder (a step of this runner, another
// runner, `apollo script`) has it, until ctx ends, and returns the function that releases
// it. With create, the lock file is made if missing (it is left in place: removing it would
// let two writers lock two files); without, a missing lock file means there is nobody to
// wait for and nothing is locked. It is never opened through a link and must be a regular
// file. A lock file removed or replaced while this one waited is not trusted: the lock is
// taken again on the file now at the path. The folder must exist.
func lockBeside(ctx context.Context, r *os.Root, rel string, create bool) (unlock func(), err error) {
	name := lockName(rel)
	// Errors name the lock file, in the script's terms: "data.jsonl": lock file ".data.jsonl.lock": ...
	lockErr := func(err error) error {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return &fs.PathError{Op: "lock", Path: rel, Err: fmt.Errorf("lock file %q: %w", filepath.Base(name), err)}
	}
	flag := os.O_RDWR
	if create {
		flag |= os.O_CREATE
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		f, err := openLeaf(r, name, flag, 0o644)
		if !create && errors.Is(err, fs.ErrNotExist) {
			return func() {}, nil
		}
		if err != nil {
			return nil, lockErr(err)
		}
		if err := flockWait(ctx, f); err != nil {
			f.Close()
			return nil, lockErr(err)
		}
		held, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, lockErr(err)
		}
		now, err := r.Lstat(name)
		if err == nil && os.SameFile(held, now) {
			// Closing the descriptor releases the flock.
			return func() { f.Close() }, nil
		}
		f.Close()
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, lockErr(err)
		}
	}
}

// removeAll removes rel of r and everything under it, following no link and stopping when
// ctx ends. A missing rel is not an error.
func removeAll(ctx context.Context, r *os.Root, rel string) error {
	dir, name := filepath.Split(rel)
	d, err := openDir(r, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	return removeTree(ctx, d, name)
}

// ctxReader stops reading when ctx ends, so a long read honours the step's timeout.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

// errEscapes is os.Root's error for a path that leaves the root. os does not export it, so
// it is taken from os.Root itself, once, and errors are matched against it by identity
// rather than by their text.
var errEscapes = sync.OnceValue(func() error {
	r, err := os.OpenRoot(string(filepath.Separator))
	if err != nil {
		return nil
	}
	defer r.Close()
	_, err = r.Lstat("..")
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return nil
})

// isEscape reports os.Root's refusal of a path that leaves the root.
func isEscape(err error) bool {
	esc := errEscapes()
	return esc != nil && errors.Is(err, esc)
}
