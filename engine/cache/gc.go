package cache

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// GCOptions say which entries apollo cache gc removes. With none set it
// removes only what no run can use: entries that cannot be read or whose
// blobs are gone, and blobs that no entry names.
type GCOptions struct {
	All       bool          // every entry
	OlderThan time.Duration // entries made longer ago than this (0: none by age)
	TaskName  string        // only the entries of this pipeline ("" for all)
	Now       time.Time
	DryRun    bool // say what would go, remove nothing
}

// GCResult is what gc removed (or would remove, in a dry run).
type GCResult struct {
	Entries []*Entry `json:"removed"`
	// Broken are entries that could not be read, or whose blobs are gone,
	// and temporary entry files a crash left.
	Broken []string `json:"broken,omitempty"`
	// Blobs counts the blobs no entry names any more, Bytes their size.
	Blobs int   `json:"blobs"`
	Bytes int64 `json:"bytes"`
	// Kept counts the entries left.
	Kept int `json:"kept"`
}

// tempAge is how old a temporary file must be for gc to take it for one a
// crash left (a run may be writing a younger one).
const tempAge = time.Hour

// GC removes the entries o asks for, then the blobs no entry left names.
// A run that saves a blob while gc runs may lose it before its entry is
// written: that entry then misses, and its step runs, as if it were not
// there.
func (s *Store) GC(o GCOptions) (*GCResult, error) {
	res := &GCResult{Entries: []*Entry{}}
	kept := s.sortEntries(o, res)
	if !o.DryRun {
		if err := s.removeEntries(res); err != nil {
			return res, err
		}
	}
	return res, s.removeBlobs(o, res, kept)
}

// sortEntries puts each entry in res.Entries (to remove), res.Broken or
// the kept count, and returns the blobs the kept entries name. With
// o.TaskName, only that pipeline's files are broken ones.
func (s *Store) sortEntries(o GCOptions, res *GCResult) map[string]bool {
	mine := filepath.Join(s.Root, "entries")
	if o.TaskName != "" {
		mine = filepath.Join(mine, nameFor(o.TaskName))
	}
	entries, bad := s.List()
	for _, err := range bad {
		var pe *fs.PathError
		switch {
		case !errors.As(err, &pe):
			res.Broken = append(res.Broken, err.Error())
		case within(mine, pe.Path):
			res.Broken = append(res.Broken, pe.Path)
		}
	}
	res.Broken = append(res.Broken, s.crashTemps(mine, o.Now)...)
	kept := map[string]bool{} // blobs named by the entries left
	for _, e := range entries {
		switch {
		case o.TaskName != "" && e.TaskName != o.TaskName:
			keepBlobs(kept, e)
			res.Kept++
		case o.All, o.OlderThan > 0 && o.Now.Sub(e.Created) > o.OlderThan:
			res.Entries = append(res.Entries, e)
		case !s.whole(e):
			res.Broken = append(res.Broken, e.File)
		default:
			keepBlobs(kept, e)
			res.Kept++
		}
	}
	return kept
}

// removeEntries removes the entries gc drops and the broken entry files.
func (s *Store) removeEntries(res *GCResult) error {
	for _, e := range res.Entries {
		if err := s.removeEntry(e.File); err != nil {
			return err
		}
	}
	for _, path := range res.Broken {
		if within(filepath.Join(s.Root, "entries"), path) {
			if err := s.removeEntry(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// removeBlobs counts (and, unless a dry run, removes) the blobs no kept
// entry names and the temporary files old enough to be a crash's.
func (s *Store) removeBlobs(o GCOptions, res *GCResult, kept map[string]bool) error {
	blobs := filepath.Join(s.Root, "blobs")
	des, err := os.ReadDir(blobs)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, de := range des {
		name := de.Name()
		info, err := de.Info()
		if err != nil {
			continue
		}
		if isTemp(name) {
			if o.Now.Sub(info.ModTime()) < tempAge {
				continue
			}
		} else if kept[name] {
			continue
		}
		res.Blobs++
		res.Bytes += info.Size()
		if !o.DryRun {
			if err := s.FS.Remove(filepath.Join(blobs, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// whole reports whether every blob an entry names is there.
func (s *Store) whole(e *Entry) bool {
	for _, f := range e.Outputs {
		if !s.Has(f.Digest) {
			return false
		}
	}
	return true
}

func keepBlobs(kept map[string]bool, e *Entry) {
	for _, f := range e.Outputs {
		kept[strings.TrimPrefix(f.Digest, "sha256:")] = true
	}
}

// removeEntry removes an entry's file, then its step's and its pipeline's
// folders when they are left empty. A removal a crash undoes leaves a
// whole entry: nothing to fsync.
func (s *Store) removeEntry(path string) error {
	if err := s.FS.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	stepDir := filepath.Dir(path)
	if s.FS.Remove(stepDir) == nil { // only an empty folder goes
		s.FS.Remove(filepath.Dir(stepDir))
	}
	return nil
}

// crashTemps lists the temporary entry files under dir old enough to be
// ones a crash left (a run may be writing a younger one).
func (s *Store) crashTemps(dir string, now time.Time) []string {
	var temps []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && isTemp(d.Name()) {
			if info, err := d.Info(); err == nil && now.Sub(info.ModTime()) >= tempAge {
				temps = append(temps, path)
			}
		}
		return nil // what cannot be read here, List reports
	})
	return temps
}

// isTemp reports whether a file name is a temporary file's (.<name>.tmp-*,
// eventlog.WriteFileAtomic).
func isTemp(name string) bool { return strings.HasPrefix(name, ".") }

// within reports whether path lies inside dir.
func within(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && filepath.IsLocal(rel)
}
