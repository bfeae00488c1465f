package luart

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
)

// Source is the text of a Lua file and the chunk name it runs under.
type Source struct {
	Chunk string `json:"chunk"`
	Text  string `json:"text"`
}

// Sources are Lua files read once, to be run as they were read rather than
// as they are on disk when a state gets to them: a step's script file and
// the modules it loads, pinned for a whole run so that an edit during the
// run cannot give one run two versions. Keys are FileKey and ModuleKey.
type Sources map[string]Source

// FileKey is the key of the script file at rel (relative to the runtime's
// root, slash-separated) in Sources.
func FileKey(rel string) string { return "file:" + filepath.ToSlash(filepath.Clean(rel)) }

// ModuleKey is the key of module name in Sources.
func ModuleKey(name string) string { return "module:" + name }

// Digest is the sha256 of the sources: their keys and texts, in key order.
// Two runs whose files have the same content have the same digest; "" for
// none.
func (ss Sources) Digest() string {
	if len(ss) == 0 {
		return ""
	}
	keys := make([]string, 0, len(ss))
	for k := range ss {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := sha256.New()
	for _, k := range keys {
		sum := sha256.Sum256([]byte(ss[k].Text))
		h.Write([]byte(k))
		h.Write([]byte{0})
		h.Write(sum[:])
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// staticRequire matches require("name") and require 'name' with a literal
// name: the modules a source is seen to load.
var staticRequire = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\brequire\s*\(?\s*["']([A-Za-z0-9_.]+)["']`) })

// Requires lists the module names text requires by a literal name
// (require("util"), require 'util'), in order, repeats included.
func Requires(text string) []string {
	var names []string
	for _, m := range staticRequire().FindAllStringSubmatch(text, -1) {
		names = append(names, m[1])
	}
	return names
}

// Gather reads what a step loads: the script files (paths relative to the
// root), the modules named, and every module these and the inline bodies
// require by a literal name, transitively, from the module folders and
// the bundled modules. Go modules (those in goModules, such as apollo.*) and
// modules found nowhere are left out: a require of one fails when it runs,
// as it would have. A file that cannot be read is an error; the others are
// in the result.
func (rt *Runtime) Gather(files, modules, inline []string, goModules func(string) bool) (Sources, error) {
	out := Sources{}
	var errs []error
	var scan func(text string)
	addModule := func(name string) {
		key := ModuleKey(name)
		if _, done := out[key]; done || !ValidModuleName(name) || (goModules != nil && goModules(name)) {
			return
		}
		chunk, src, err := rt.findModule(name)
		if errors.Is(err, errModuleNotFound) {
			return
		}
		if err != nil {
			errs = append(errs, err)
			return
		}
		out[key] = Source{Chunk: chunk, Text: src}
		scan(src)
	}
	scan = func(text string) {
		for _, name := range Requires(text) {
			addModule(name)
		}
	}
	for _, f := range files {
		rel, err := rt.rootRel(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		key := FileKey(rel)
		if _, done := out[key]; done {
			continue
		}
		src, err := readInRoot(rt.root, rel)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out[key] = Source{Chunk: filepath.ToSlash(rel), Text: src}
		scan(src)
	}
	for _, m := range modules {
		addModule(m)
	}
	for _, text := range inline {
		scan(text)
	}
	return out, errors.Join(errs...)
}

// rootRel returns path relative to the root: a relative path as it is
// (reading it through the root refuses a way out), an absolute one only
// when it is inside the root.
func (rt *Runtime) rootRel(path string) (string, error) {
	rel := filepath.Clean(path)
	if filepath.IsAbs(rel) {
		r, ok := rt.relInRoot(rel)
		if !ok || r == "" {
			return "", fmt.Errorf("luart: %s is not a file inside %s", path, rt.root)
		}
		rel = filepath.FromSlash(r)
	}
	return rel, nil
}
