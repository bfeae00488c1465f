package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"apollo/eventlog"
)

// Store is the cache of one state folder.
type Store struct {
	// Root is <state-dir>/cache.
	Root string
	// FS is the file-system seam of its writes; nil means the real one.
	FS eventlog.FS
}

// New returns the store of the state folder stateDir.
func New(stateDir string, fsys eventlog.FS) *Store {
	if fsys == nil {
		fsys = eventlog.OS{}
	}
	return &Store{Root: filepath.Join(stateDir, "cache"), FS: fsys}
}

// entryVersion is the format of an entry file; an entry of another
// version is not used.
const entryVersion = 1

// Entry is one successful result of a cached step.
type Entry struct {
	V        int    `json:"v"`
	Key      string `json:"key"` // sha256:<hex> of everything the result depends on
	TaskName string `json:"task_name"`
	Step     string `json:"step"`
	// TaskID is the task run whose attempt made the result.
	TaskID  string    `json:"task_id"`
	Created time.Time `json:"created"`
	// What went into Key, kept to say what changed when a later run's key
	// differs: the step's input and definition digests, the sha256 of the
	// author's cache.key (it may hold a secret var), the output digests of
	// the steps upstream, the inputs. Paths name a secret as "***".
	InputDigest      string            `json:"input_digest"`
	DefinitionDigest string            `json:"definition_digest"`
	UserKeyDigest    string            `json:"user_key_digest,omitempty"`
	Upstream         map[string]string `json:"upstream,omitempty"`
	Inputs           []File            `json:"inputs,omitempty"`
	// The result: the step's output and its files.
	OutputDigest string          `json:"output_digest"`
	Output       json.RawMessage `json:"output,omitempty"`
	Outputs      []File          `json:"outputs,omitempty"`

	// File is where the entry was read from ("" for one not read).
	File string `json:"-"`
}

// File is a file as the cache knows it: its path as the pipeline names it,
// and its content's digest.
type File struct {
	Path   string      `json:"path"`
	Digest string      `json:"digest"` // sha256:<hex>
	Size   int64       `json:"size"`
	Mode   fs.FileMode `json:"mode,omitempty"` // permission bits
}

// Bytes is the size of the files an entry restores.
func (e *Entry) Bytes() int64 {
	var n int64
	for _, f := range e.Outputs {
		n += f.Size
	}
	return n
}

// entries is the folder of the entries of one pipeline's step.
func (s *Store) entries(taskName, step string) string {
	return filepath.Join(s.Root, "entries", nameFor(taskName), nameFor(step))
}

// entryPath is the file of the entry with key.
func (s *Store) entryPath(taskName, step, key string) string {
	return filepath.Join(s.entries(taskName, step), strings.TrimPrefix(key, "sha256:")+".json")
}

// Blob is the file that holds the content with digest, a valid one
// (ValidDigest): another digest is no file's name.
func (s *Store) Blob(digest string) string {
	return filepath.Join(s.Root, "blobs", strings.TrimPrefix(digest, "sha256:"))
}

// ValidDigest reports whether d is sha256:<64 lower-case hex digits>: an
// entry's digest names a blob, so one that is anything else
// (sha256:../../x) must never reach a path.
func ValidDigest(d string) bool {
	hexPart, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(hexPart) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// nameFor makes a task name or a step id (convert[eu,x]) a folder name:
// bytes other than letters, digits, "_", "-", "[", "]" and "," are written
// %XX, and so are the dots of "." and "..".
func nameFor(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			c == '_', c == '-', c == '[', c == ']', c == ',', c == '.' && s != "." && s != "..":
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Get returns the entry of taskName's step with key, or nil when there is
// none. An entry that cannot be read is an error (the step runs).
func (s *Store) Get(taskName, step, key string) (*Entry, error) {
	e, err := readEntry(s.entryPath(taskName, step, key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if e.Key != key || e.TaskName != taskName || e.Step != step {
		return nil, fmt.Errorf("cache entry %s: it is not the entry of its name", e.File)
	}
	return e, nil
}

// Latest returns the newest entry of taskName's step, or nil when there is
// none: what a result that missed is compared with, to say why.
func (s *Store) Latest(taskName, step string) (*Entry, error) {
	dir := s.entries(taskName, step)
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list cache entries: %w", err)
	}
	var latest *Entry
	for _, de := range des {
		if !isEntryName(de.Name()) {
			continue
		}
		e, err := readEntry(filepath.Join(dir, de.Name()))
		if err != nil {
			continue // unreadable: not one to compare with
		}
		if latest == nil || e.Created.After(latest.Created) {
			latest = e
		}
	}
	return latest, nil
}

// isEntryName reports whether a file name is an entry's, not a temporary
// file's (.<name>.tmp-*).
func isEntryName(name string) bool {
	return strings.HasSuffix(name, ".json") && !isTemp(name)
}

func readEntry(path string) (*Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// A *fs.PathError ("cache entry PATH: ..."), so that gc finds the
	// file to remove.
	e := &Entry{}
	if err := json.Unmarshal(b, e); err != nil {
		return nil, &fs.PathError{Op: "cache entry", Path: path, Err: err}
	}
	if e.V != entryVersion {
		return nil, &fs.PathError{Op: "cache entry", Path: path, Err: fmt.Errorf("format %d, not %d", e.V, entryVersion)}
	}
	for _, f := range e.Outputs {
		if !ValidDigest(f.Digest) {
			return nil, &fs.PathError{Op: "cache entry", Path: path, Err: fmt.Errorf("output %q: digest %q is not sha256:<hex>", f.Path, f.Digest)}
		}
	}
	e.File = path
	return e, nil
}

// Put writes e, replacing an entry of the same key. The blobs of its
// outputs must be saved first (Save): an entry is only ever written whole,
// after everything it names.
func (s *Store) Put(e *Entry) error {
	e.V = entryVersion
	dir := s.entries(e.TaskName, e.Step)
	if err := eventlog.MkdirAll(s.FS, dir); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	b, err := json.MarshalIndent(e, "", "  ")
	if err != nil {
		return fmt.Errorf("cache: encode entry: %w", err)
	}
	path := s.entryPath(e.TaskName, e.Step, e.Key)
	if err := eventlog.WriteFileAtomic(s.FS, path, 0o644, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	}); err != nil {
		return fmt.Errorf("cache: %w", err)
	}
	e.File = path
	return nil
}

// HashFile returns the sha256:<hex> digest and the size of a regular file.
func HashFile(path string) (string, int64, error) {
	digest, size, _, err := hashFile(path, true)
	return digest, size, err
}

// hashFile is HashFile, also returning the file's information. A path
// that is not a regular file (a named pipe would hang a plain open) is an
// error; follow says whether a symbolic link at path is followed or
// refused.
func hashFile(path string, follow bool) (string, int64, fs.FileInfo, error) {
	f, err := eventlog.OpenRegular(path, follow)
	if err != nil {
		return "", 0, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, nil, err
	}
	digest, n, err := copyDigest(nil, f)
	if err != nil {
		return "", 0, nil, err
	}
	return digest, n, fi, nil
}

// copyDigest copies r to w (nil: to nowhere) and returns the sha256:<hex>
// digest and the size of what it copied.
func copyDigest(w io.Writer, r io.Reader) (string, int64, error) {
	h := sha256.New()
	dst := io.Writer(h)
	if w != nil {
		dst = io.MultiWriter(w, h)
	}
	n, err := io.Copy(dst, r)
	if err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}

// Save keeps the content of the file rel of the folder root (a step's
// outputs: file) as a blob, unless a blob of the same content is there,
// and returns the file as the cache knows it, Path set to rel. rel must
// stay inside root, and neither it nor a folder between root and it may be
// a symbolic link: an output is a file of the workspace, and the content
// of a file a link points to (/etc/hostname) never enters the store.
func (s *Store) Save(root, rel string) (File, error) {
	path, err := under(nil, root, rel, false)
	if err != nil {
		return File{}, err
	}
	digest, size, fi, err := hashFile(path, false)
	if err != nil {
		return File{}, err
	}
	f := File{Path: rel, Digest: digest, Size: size, Mode: fi.Mode().Perm()}
	if s.Has(digest) {
		return f, nil
	}
	blob := s.Blob(digest)
	if err := eventlog.MkdirAll(s.FS, filepath.Dir(blob)); err != nil {
		return File{}, fmt.Errorf("cache: %w", err)
	}
	// Copied through a digest: a file that changes while it is read is
	// refused, never kept under the wrong name.
	if err := eventlog.WriteFileAtomic(s.FS, blob, 0o444, func(w io.Writer) error {
		return copyChecked(w, path, digest)
	}); err != nil {
		return File{}, fmt.Errorf("cache: save %s: %w", rel, err)
	}
	return f, nil
}

// under returns the path of rel inside root, after checking that rel stays
// inside root (not absolute, no "..") and that no folder between root and
// it is a symbolic link or not a folder. With create, missing folders are
// made through fsys (and the check covers those that were there); without, a missing
// folder is left for the open that follows to report.
func under(fsys eventlog.FS, root, rel string, create bool) (string, error) {
	if !filepath.IsLocal(rel) {
		return "", fmt.Errorf("%q leaves the step's folder", rel)
	}
	rel = filepath.Clean(rel)
	dir := root
	parts := strings.Split(filepath.Dir(rel), string(filepath.Separator))
	for i, part := range parts {
		if part == "." {
			break
		}
		dir = filepath.Join(dir, part)
		fi, err := os.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			if !create {
				break
			}
			// The rest is missing: nothing there to be a link.
			if err := eventlog.MkdirAll(fsys, filepath.Join(root, filepath.Join(parts[i:]...))); err != nil {
				return "", err
			}
			break
		}
		if err != nil {
			return "", err
		}
		if !fi.IsDir() {
			what := "not a folder"
			if fi.Mode()&fs.ModeSymlink != 0 {
				what = "a symbolic link"
			}
			return "", &eventlog.UnsafeFileError{Path: rel,
				Reason: fmt.Sprintf("the folder %s on its path is %s", filepath.Join(parts[:i+1]...), what)}
		}
	}
	return filepath.Join(root, rel), nil
}

// errDamaged says a file's content is not what its digest says.
var errDamaged = errors.New("content does not match its digest")

// copyChecked copies the file at path to w, and fails unless its content
// has digest. A symbolic link at path is refused.
func copyChecked(w io.Writer, path, digest string) error {
	src, err := eventlog.OpenRegular(path, false)
	if err != nil {
		return err
	}
	defer src.Close()
	got, _, err := copyDigest(w, src)
	if err != nil {
		return err
	}
	if got != digest {
		return fmt.Errorf("%s: %w: it is %s, want %s (changed, or damaged)", path, errDamaged, got, digest)
	}
	return nil
}

// Has reports whether the blob of digest is there.
func (s *Store) Has(digest string) bool {
	if !ValidDigest(digest) {
		return false
	}
	fi, err := os.Lstat(s.Blob(digest))
	return err == nil && fi.Mode().IsRegular()
}

// Holds reports whether the file f.Path of the folder root holds f's
// content: a regular file, reached through no symbolic link.
func Holds(root string, f File) bool {
	path, err := under(nil, root, f.Path, false)
	if err != nil {
		return false
	}
	d, _, _, err := hashFile(path, false)
	return err == nil && d == f.Digest
}

// Restore makes the file f.Path of the folder root hold f's content: it
// reports false when it already does, and otherwise writes it atomically
// from f's blob, checked against f's digest first, so the file is never
// left with a part or a wrong content. f.Path must stay inside root, and
// neither the file nor a folder between root and it may be a symbolic
// link (it is refused, not written through). Only f's permission bits are
// applied: a setuid or sticky bit an edited entry names is dropped.
func (s *Store) Restore(root string, f File) (bool, error) {
	if !ValidDigest(f.Digest) {
		return false, fmt.Errorf("%s: digest %q is not sha256:<hex>", f.Path, f.Digest)
	}
	dst, err := under(s.FS, root, f.Path, true)
	if err != nil {
		return false, err
	}
	d, _, _, err := hashFile(dst, false)
	var unsafe *eventlog.UnsafeFileError
	switch {
	case err == nil && d == f.Digest:
		return false, nil
	case errors.As(err, &unsafe):
		return false, err
	}
	mode := f.Mode & fs.ModePerm
	if mode == 0 {
		mode = 0o644
	}
	if err := eventlog.WriteFileAtomic(s.FS, dst, mode, func(w io.Writer) error {
		return copyChecked(w, s.Blob(f.Digest), f.Digest)
	}); err != nil {
		if errors.Is(err, errDamaged) {
			// A damaged blob goes, so that the step's next success saves
			// it again instead of finding it there.
			s.FS.Remove(s.Blob(f.Digest))
		}
		return false, err
	}
	return true, nil
}

// List returns every entry of the store, by pipeline, step and age
// (newest first), and the entries that could not be read as errors.
func (s *Store) List() ([]*Entry, []error) {
	var out []*Entry
	var bad []error
	root := filepath.Join(s.Root, "entries")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == root && errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			bad = append(bad, err)
			return nil
		}
		if d.IsDir() || !isEntryName(d.Name()) {
			return nil
		}
		e, err := readEntry(path)
		if err != nil {
			bad = append(bad, err)
			return nil
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		bad = append(bad, err)
	}
	slices.SortFunc(out, func(a, b *Entry) int {
		if c := strings.Compare(a.TaskName, b.TaskName); c != 0 {
			return c
		}
		if c := strings.Compare(a.Step, b.Step); c != 0 {
			return c
		}
		return b.Created.Compare(a.Created)
	})
	return out, bad
}
