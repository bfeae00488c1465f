//go:build unix

package stdlib

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"apollo/eventlog"
)

// Flags for opening a script's files: non-blocking, so that opening a FIFO returns at once
// instead of waiting for its other end (the file is refused after fstat anyway), and never
// taking a terminal as the controlling one.
const (
	openNonblock = unix.O_NONBLOCK | unix.O_NOCTTY
	openFolder   = unix.O_DIRECTORY | unix.O_NONBLOCK
)

// openLeaf opens file rel of r without following a symbolic link at its last component:
// its folder is opened through r (no link or ".." leads out of the area), the last name
// with openat(O_NOFOLLOW), so a link there, even one swapped in after every check, is
// refused and never written through. Only a regular file is accepted: the open does not
// block (O_NONBLOCK) and the type is checked on the opened descriptor, so a FIFO, socket or
// device swapped in is closed unread. O_TRUNC is applied after that check.
func openLeaf(r *os.Root, rel string, flag int, perm fs.FileMode) (*os.File, error) {
	dir, name := filepath.Split(rel)
	if name == "" || name == "." || name == ".." {
		return nil, &fs.PathError{Op: "open", Path: rel, Err: errIsFolder}
	}
	d, err := openDir(r, dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	sc, err := d.SyscallConn()
	if err != nil {
		return nil, err
	}
	trunc := flag&os.O_TRUNC != 0
	flag = flag&^os.O_TRUNC | unix.O_NOFOLLOW | unix.O_CLOEXEC | openNonblock
	fd := -1
	var oerr error
	cerr := sc.Control(func(dfd uintptr) {
		// What is there now decides the message; the check on the opened descriptor
		// below is the guarantee.
		var st unix.Stat_t
		oerr = ignoringEINTR(func() error { return unix.Fstatat(int(dfd), name, &st, unix.AT_SYMLINK_NOFOLLOW) })
		if oerr == nil {
			if mode := eventlog.StatFileType(uint32(st.Mode)); mode != 0 {
				oerr = &notRegularError{mode: mode}
				return
			}
		}
		oerr = ignoringEINTR(func() (err error) {
			fd, err = unix.Openat(int(dfd), name, flag, uint32(perm.Perm()))
			return err
		})
	})
	if cerr != nil {
		return nil, cerr
	}
	if oerr != nil {
		if oerr == unix.ELOOP || oerr == unix.EMLINK {
			// O_NOFOLLOW's answer for a link (EMLINK on the BSDs).
			oerr = &notRegularError{mode: fs.ModeSymlink}
		}
		return nil, &fs.PathError{Op: "open", Path: rel, Err: oerr}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "fstat", Path: rel, Err: err}
	}
	if mode := eventlog.StatFileType(uint32(st.Mode)); mode != 0 {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: rel, Err: &notRegularError{mode: mode}}
	}
	// A regular file: reads and writes never wait, so the descriptor is made an ordinary
	// blocking one for os.File.
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "open", Path: rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), filepath.Join(r.Name(), rel))
	if trunc {
		if err := f.Truncate(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// flockPoll bounds the pause between two tries of a held lock.
const flockPoll = 20 * time.Millisecond

// flockWait takes an exclusive flock on f, waiting while another open file description
// holds it (another process, or another step of this one), until ctx ends. It tries without
// blocking and sleeps between tries, so the wait ends with the step's context: a blocking
// flock cannot be interrupted.
func flockWait(ctx context.Context, f *os.File) error {
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	pause := time.Millisecond
	for {
		var lerr error
		if err := sc.Control(func(fd uintptr) {
			for {
				lerr = unix.Flock(int(fd), unix.LOCK_EX|unix.LOCK_NB)
				if lerr != unix.EINTR {
					return
				}
			}
		}); err != nil {
			return err
		}
		if lerr == nil {
			return nil
		}
		if lerr != unix.EWOULDBLOCK {
			return &fs.PathError{Op: "flock", Path: f.Name(), Err: lerr}
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		pause = min(2*pause, flockPoll)
	}
}

// removeTree removes name, in the folder d, and everything under it. Nothing is followed:
// a link is removed, not its target, and each folder is opened with O_NOFOLLOW from its
// parent's descriptor, so a folder swapped for a link meanwhile is not entered. ctx is
// checked before every entry, so a huge tree stops at the step's timeout.
func removeTree(ctx context.Context, d *os.File, name string) error {
	sc, err := d.SyscallConn()
	if err != nil {
		return err
	}
	control := func(f func(dfd int) error) error {
		var ferr error
		if err := sc.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
			return err
		}
		return ferr
	}
	err = control(func(dfd int) error { return ignoringEINTR(func() error { return unix.Unlinkat(dfd, name, 0) }) })
	switch {
	case err == nil || err == unix.ENOENT:
		return nil
	case err != unix.EISDIR && err != unix.EPERM: // a folder: EISDIR on Linux, EPERM elsewhere
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	for {
		var fd int
		err := control(func(dfd int) error {
			return ignoringEINTR(func() (err error) {
				fd, err = unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				return err
			})
		})
		if err == unix.ENOENT {
			return nil
		}
		if err != nil {
			return &fs.PathError{Op: "open", Path: name, Err: err}
		}
		sub := os.NewFile(uintptr(fd), name)
		// Entries are read in batches and the folder read again from the start after each:
		// removing entries may reorder it, so reading on could skip some.
		names, rerr := sub.Readdirnames(1024)
		for _, n := range names {
			if err := ctx.Err(); err != nil {
				sub.Close()
				return context.Cause(ctx)
			}
			if err := removeTree(ctx, sub, n); err != nil {
				sub.Close()
				var pe *fs.PathError
				if errors.As(err, &pe) {
					pe.Path = filepath.Join(name, pe.Path)
				}
				return err
			}
		}
		sub.Close()
		if len(names) == 0 || rerr != nil {
			break
		}
	}
	err = control(func(dfd int) error {
		return ignoringEINTR(func() error { return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR) })
	})
	if err != nil && err != unix.ENOENT {
		return &fs.PathError{Op: "remove", Path: name, Err: err}
	}
	return nil
}

func ignoringEINTR(f func() error) error {
	for {
		if err := f(); err != unix.EINTR {
			return err
		}
	}
}
