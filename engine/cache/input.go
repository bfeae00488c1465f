package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// ErrInputMissing says an inputs: path does not exist: a key of its own
// ("input x is missing"), not a reason to leave the cache alone.
var ErrInputMissing = errors.New("no such file or folder")

// HashInput returns the digest and size of a step's inputs: path. A
// regular file's digest is its content's (HashFile); a folder's covers,
// in lexical order, the path of everything under it relative to it, each
// regular file's content and executable bit, each symbolic link's target
// (not followed) and each folder, so that adding, removing, renaming or
// changing any of them changes it; its size is the sum of its files'. A
// symbolic link at path itself is followed, as for a file. A path that
// does not exist (or under a file) is ErrInputMissing; one that exists but
// cannot be hashed — permission denied, a named pipe, a socket or a
// device, at path or under it — is another error, which must keep the
// step's result out of the cache, since its key could not tell it apart.
func HashInput(path string) (string, int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			return "", 0, ErrInputMissing
		}
		return "", 0, err
	}
	if !fi.IsDir() {
		return HashFile(path) // refuses what is not a regular file, without opening a pipe
	}
	real, err := filepath.EvalSymlinks(path) // a walk does not enter a link, even at its root
	if err != nil {
		return "", 0, err
	}
	return hashTree(real)
}

// hashTree is HashInput of the folder root.
func hashTree(root string) (string, int64, error) {
	h := sha256.New()
	var size int64
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if path == root {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch t := d.Type(); {
		case t.IsDir():
			fmt.Fprintf(h, "d %q\n", rel)
		case t&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "l %q %q\n", rel, target)
		default:
			digest, n, fi, err := hashFile(path, false)
			if err != nil {
				return err
			}
			exec := "-"
			if fi.Mode()&0o111 != 0 {
				exec = "x"
			}
			fmt.Fprintf(h, "f %q %s %s\n", rel, exec, digest)
			size += n
		}
		return nil
	})
	if err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), size, nil
}
