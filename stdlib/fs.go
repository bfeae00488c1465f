package stdlib

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	lua "github.com/yuin/gopher-lua"
)

func (lib *library) fsFuncs() map[string]lua.LGFunction {
	return map[string]lua.LGFunction{
		"read":   lib.fsRead,
		"write":  lib.fsWrite,
		"append": lib.fsAppend,
		"exists": lib.fsExists,
		"remove": lib.fsRemove,
		"mkdir":  lib.fsMkdir,
		"list":   lib.fsList,
		"stat":   lib.fsStat,
		"rename": lib.fsRename,
	}
}

// at resolves argument 1 of fn and calls op in its area's root; errors are raised.
func (lib *library) at(L *lua.LState, fn string, op func(r *os.Root, rel string) error) {
	path := checkPath(L, fn, 1)
	checkContext(L, fn)
	p, err := lib.confine().resolve(path)
	if err != nil {
		raise(L, fn, "%v", err)
	}
	if err := p.with(op); err != nil {
		raise(L, fn, "%v", err)
	}
}

func (lib *library) fsRead(L *lua.LState) int {
	ctx := stepContext(L)
	var data []byte
	lib.at(L, "fs.read", func(r *os.Root, rel string) error {
		f, fi, err := openRead(r, rel, " (use fs.list)")
		if err != nil {
			return err
		}
		defer f.Close()
		tooLarge := &fs.PathError{Op: "read", Path: rel, Err: fmt.Errorf("larger than the %d MiB fs.read reads (use digest.file, or split the file)", MaxReadBytes>>20)}
		if fi.Size() > MaxReadBytes {
			return tooLarge
		}
		var buf bytes.Buffer
		buf.Grow(int(fi.Size()) + 1)
		if _, err := buf.ReadFrom(io.LimitReader(&ctxReader{ctx: ctx, r: f}, MaxReadBytes+1)); err != nil {
			return err
		}
		if buf.Len() > MaxReadBytes { // it grew meanwhile
			return tooLarge
		}
		data = buf.Bytes()
		return nil
	})
	L.Push(lua.LString(data))
	return 1
}

func (lib *library) fsWrite(L *lua.LState) int {
	data := checkString(L, "fs.write", 2, "data")
	lib.at(L, "fs.write", func(r *os.Root, rel string) error {
		return writeFile(r, rel, data, os.O_TRUNC)
	})
	return 0
}

func (lib *library) fsAppend(L *lua.LState) int {
	data := checkString(L, "fs.append", 2, "data")
	lib.at(L, "fs.append", func(r *os.Root, rel string) error {
		return writeFile(r, rel, data, os.O_APPEND)
	})
	return 0
}

// writeFile writes data to rel (truncating or appending), creating missing parent folders.
// Only a regular file is written, never through a link at rel (see openLeaf).
func writeFile(r *os.Root, rel, data string, flag int) error {
	if err := mkdirAll(r, filepath.Dir(rel)); err != nil {
		return err
	}
	f, err := openLeaf(r, rel, os.O_WRONLY|os.O_CREATE|flag, 0o644)
	if err != nil {
		return err
	}
	_, err = io.WriteString(f, data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (lib *library) fsExists(L *lua.LState) int {
	found := false
	lib.at(L, "fs.exists", func(r *os.Root, rel string) error {
		_, err := r.Stat(rel)
		switch {
		case err == nil:
			found = true
		case errors.Is(err, fs.ErrNotExist):
		default:
			return err
		}
		return nil
	})
	L.Push(lua.LBool(found))
	return 1
}

func (lib *library) fsRemove(L *lua.LState) int {
	const fn = "fs.remove"
	recursive := false
	if opts := optTable(L, fn, 2, "options"); opts != nil {
		checkOptions(L, fn, opts, "recursive")
		recursive = lua.LVAsBool(opts.RawGetString("recursive"))
	}
	ctx := stepContext(L)
	lib.at(L, fn, func(r *os.Root, rel string) error {
		if rel == "." {
			return &fs.PathError{Op: "remove", Path: rel, Err: errors.New("refusing to remove the workspace or the state directory itself")}
		}
		if recursive {
			return removeAll(ctx, r, rel)
		}
		err := r.Remove(rel)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	})
	return 0
}

func (lib *library) fsMkdir(L *lua.LState) int {
	lib.at(L, "fs.mkdir", mkdirAll)
	return 0
}

func (lib *library) fsList(L *lua.LState) int {
	ctx := stepContext(L)
	var names []string
	lib.at(L, "fs.list", func(r *os.Root, rel string) error {
		d, err := openDir(r, rel)
		if err != nil {
			return err
		}
		defer d.Close()
		for {
			if err := ctx.Err(); err != nil {
				return context.Cause(ctx)
			}
			batch, err := d.Readdirnames(4096)
			names = append(names, batch...)
			if len(names) > MaxListNames {
				return &fs.PathError{Op: "list", Path: rel, Err: fmt.Errorf("holds more than the %d names fs.list returns", MaxListNames)}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
		}
		slices.Sort(names)
		return nil
	})
	t := L.CreateTable(len(names), 0)
	for _, n := range names {
		t.Append(lua.LString(n))
	}
	L.Push(t)
	return 1
}

func (lib *library) fsStat(L *lua.LState) int {
	var fi fs.FileInfo
	lib.at(L, "fs.stat", func(r *os.Root, rel string) error {
		var err error
		fi, err = r.Stat(rel)
		return err
	})
	t := L.CreateTable(0, 3)
	t.RawSetString("size", lua.LNumber(fi.Size()))
	t.RawSetString("is_dir", lua.LBool(fi.IsDir()))
	t.RawSetString("mtime", lua.LNumber(fi.ModTime().Unix()))
	L.Push(t)
	return 1
}

func (lib *library) fsRename(L *lua.LState) int {
	const fn = "fs.rename"
	oldPath := checkPath(L, fn, 1)
	newPath := checkPath(L, fn, 2)
	checkContext(L, fn)
	from, to, err := lib.confine().resolvePair(oldPath, newPath)
	if err != nil {
		raise(L, fn, "%v", err)
	}
	err = from.with(func(r *os.Root, rel string) error {
		if rel == "." {
			return &fs.PathError{Op: "rename", Path: rel, Err: errors.New("refusing to move the workspace or the state directory itself")}
		}
		if err := mkdirAll(r, filepath.Dir(to.rel)); err != nil {
			return to.explain(err)
		}
		err := r.Rename(rel, to.rel)
		var le *os.LinkError
		switch {
		case err == nil:
			return nil
		case isEscape(err):
			return fmt.Errorf("cannot rename %q to %q: a symbolic link leads outside the workspace and the state directory", oldPath, newPath)
		case errors.As(err, &le):
			return &pathError{path: oldPath, err: le.Err, what: fmt.Sprintf("cannot rename %q to %q", oldPath, newPath)}
		}
		return err
	})
	if err != nil {
		raise(L, fn, "%v", err)
	}
	return 0
}
