package stdlib

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// area is one folder scripts may touch: the workspace or the state directory.
type area struct {
	name string // "the workspace", "the state directory"
	dir  string // absolute, clean
	real string // dir with symbolic links resolved, when that differs; "" otherwise
}

// contains returns p (absolute, clean) relative to the area, if p lies inside it.
func (a *area) contains(p string) (string, bool) {
	for _, d := range []string{a.dir, a.real} {
		if d == "" {
			continue
		}
		if rel, err := filepath.Rel(d, p); err == nil && filepath.IsLocal(rel) {
			return rel, true
		}
	}
	return "", false
}

// confinement resolves script paths into the workspace and the state directory. Every file
// operation then goes through an os.Root opened on the area's folder, so neither "..", nor
// an absolute path, nor a symbolic link (even one swapped in while the step runs) reaches
// outside: the lexical check gives the clear message, os.Root the guarantee.
type confinement struct {
	areas []*area // the workspace first
}

func newConfinement(workspace, stateDir string) *confinement {
	c := &confinement{}
	for _, a := range []struct{ name, dir string }{{"the workspace", workspace}, {"the state directory", stateDir}} {
		if a.dir == "" {
			continue
		}
		dir, err := filepath.Abs(a.dir)
		if err != nil {
			continue
		}
		ar := &area{name: a.name, dir: dir}
		if real, err := filepath.EvalSymlinks(dir); err == nil && real != dir {
			ar.real = real
		}
		c.areas = append(c.areas, ar)
	}
	return c
}

// place is a resolved path: an area and a local path inside it.
type place struct {
	area *area
	rel  string
	user string // the path as the script wrote it, for messages
}

// abs is the place as an absolute path (for exec's working folder).
func (p place) abs() string { return filepath.Join(p.area.dir, p.rel) }

// outsideError is a path that leaves the workspace and the state directory.
type outsideError struct {
	path   string
	detail string
}

func (e *outsideError) Error() string {
	msg := fmt.Sprintf("path %q is outside the workspace and the state directory", e.path)
	if e.detail != "" {
		msg += " (" + e.detail + ")"
	}
	return msg
}

// absolute makes p absolute: a relative path is taken from the workspace.
func (c *confinement) absolute(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	if strings.ContainsRune(p, 0) {
		return "", fmt.Errorf("path %q contains a NUL byte", p)
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	if len(c.areas) == 0 || c.areas[0].name != "the workspace" {
		return "", fmt.Errorf("relative path %q: there is no workspace", p)
	}
	return filepath.Join(c.areas[0].dir, p), nil
}

// candidates returns the places p may be in, the deepest area first (the state directory is
// often inside the workspace).
func (c *confinement) candidates(p string) ([]place, error) {
	abs, err := c.absolute(p)
	if err != nil {
		return nil, err
	}
	var out []place
	for _, a := range c.areas {
		if rel, ok := a.contains(abs); ok {
			out = append(out, place{area: a, rel: rel, user: p})
		}
	}
	if len(out) == 0 {
		detail := ""
		if !filepath.IsAbs(p) {
			detail = `".." leads out`
		}
		return nil, &outsideError{path: p, detail: detail}
	}
	if len(out) == 2 && out[1].preferred(out[0]) {
		out[0], out[1] = out[1], out[0]
	}
	return out, nil
}

// preferred reports whether p should be used rather than q, both holding the same path: the
// deeper area (the state directory inside the workspace), unless its folder does not exist
// yet.
func (p place) preferred(q place) bool {
	if _, err := os.Stat(p.area.dir); err != nil {
		return false
	}
	if _, err := os.Stat(q.area.dir); err != nil {
		return true
	}
	return len(p.area.dir) > len(q.area.dir)
}

// resolve returns the place of p.
func (c *confinement) resolve(p string) (place, error) {
	cs, err := c.candidates(p)
	if err != nil {
		return place{}, err
	}
	return cs[0], nil
}

// resolvePair returns the places of two paths in one area (for rename).
func (c *confinement) resolvePair(p, q string) (place, place, error) {
	ps, err := c.candidates(p)
	if err != nil {
		return place{}, place{}, err
	}
	qs, err := c.candidates(q)
	if err != nil {
		return place{}, place{}, err
	}
	for _, a := range ps {
		for _, b := range qs {
			if a.area == b.area {
				return a, b, nil
			}
		}
	}
	return place{}, place{}, fmt.Errorf("cannot rename %q to %q: one is in %s, the other in %s", p, q, ps[0].area.name, qs[0].area.name)
}

// with opens the place's area as an os.Root and calls fn with it and the local path.
func (p place) with(fn func(r *os.Root, rel string) error) error {
	r, err := os.OpenRoot(p.area.dir)
	if err != nil {
		return fmt.Errorf("open %s %s: %w", p.area.name, p.area.dir, err)
	}
	defer r.Close()
	return p.explain(fn(r, p.rel))
}

// explain rewrites an os.Root error about p for a script: the path as the script wrote it
// and a plain reason.
func (p place) explain(err error) error {
	if err == nil {
		return nil
	}
	var oe *outsideError
	if errors.As(err, &oe) {
		return err
	}
	if isEscape(err) {
		return &outsideError{path: p.user, detail: "a symbolic link or \"..\" leads out"}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &pathError{path: p.user, err: pe.Err}
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return &pathError{path: p.user, err: le.Err}
	}
	return err
}

// pathError is an operating-system error about a script's path.
type pathError struct {
	path string
	err  error
	// what replaces the quoted path in the message ("cannot rename \"a\" to \"b\"").
	what string
}

func (e *pathError) Error() string {
	what := e.what
	if what == "" {
		what = fmt.Sprintf("%q", e.path)
	}
	return what + ": " + e.reason()
}

// reason is the error without the path, in plain words for the common cases.
func (e *pathError) reason() string {
	switch {
	case errors.Is(e.err, fs.ErrNotExist):
		return "no such file or folder"
	case errors.Is(e.err, fs.ErrExist):
		return "already exists"
	case errors.Is(e.err, fs.ErrPermission):
		return "permission denied"
	}
	return e.err.Error()
}

func (e *pathError) Unwrap() error { return e.err }

// syncDir fsyncs folder rel of r, so a rename or a creation in it survives power loss.
func syncDir(r *os.Root, rel string) error {
	d, err := openDir(r, rel)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync folder %q: %w", rel, err)
	}
	return nil
}

// mkdirAll creates folder rel and its missing parents in r, fsyncing the parent of every
// folder it creates.
func mkdirAll(r *os.Root, rel string) error {
	rel = filepath.Clean(rel)
	if rel == "." {
		return nil
	}
	fi, err := r.Stat(rel)
	switch {
	case err == nil && !fi.IsDir():
		return &fs.PathError{Op: "mkdir", Path: rel, Err: errors.New("a file is in the way of the folder")}
	case err == nil:
		return nil
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	if err := mkdirAll(r, filepath.Dir(rel)); err != nil {
		return err
	}
	err = r.Mkdir(rel, 0o755)
	if errors.Is(err, fs.ErrExist) {
		if fi, serr := r.Stat(rel); serr == nil && fi.IsDir() {
			return nil // made meanwhile
		}
		return &fs.PathError{Op: "mkdir", Path: rel, Err: errors.New("a file is in the way of the folder")}
	}
	if err != nil {
		return err
	}
	return syncDir(r, filepath.Dir(rel))
}
