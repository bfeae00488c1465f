package pipeline

import (
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"apollo/engine/template"
)

// Cache is a step's cache: (docs/spec.md §5.15). A step with one is not
// run again when a successful earlier run of the same pipeline had the
// same inputs: its output is taken from that run and its outputs: files
// restored.
type Cache struct {
	// Key is text of the author's added to the cache key (cache.key),
	// templated: changing it makes every earlier result unusable.
	Key string
}

// cacheKeys are the keys of a cache: mapping.
var cacheKeys = []string{"key", "paths"}

// cache decodes cache: true, false, or {key: TEXT, paths: [FILES]}; the
// paths join the step's outputs.
func (si *stepInfo) cache(kv keyValue) {
	v := deref(kv.v)
	switch {
	case v.Kind == yaml.ScalarNode && (v.Tag == "!!bool" || v.Tag == "!!str" && yaml11Bools[strings.ToLower(v.Value)]):
		if on, ok := si.at.boolean(kv.key, v); ok && on {
			si.s.Cache = &Cache{}
		}
		return
	case v.Kind != yaml.MappingNode:
		si.at.errf(v.Line, "cache must be true, false or a mapping with key and paths (cache: {key: v2, paths: [out.csv]}), not %s", describe(v))
		return
	}
	c := &Cache{}
	for _, p := range si.at.pairs(v) {
		switch p.key {
		case "key":
			if k, ok := si.at.nonEmpty("cache.key", p.v); ok {
				if noOutputRef(si, "cache.key", p.v, k) {
					si.at.template("cache.key", deref(p.v), k, false)
				}
				c.Key = k
			}
		case "paths":
			si.s.Outputs = append(si.s.Outputs, si.pathList("cache.paths", p.v, si.s.Outputs)...)
		default:
			si.at.errf(p.k.Line, "cache has an unknown key %q%s; it takes key and paths", snippet(p.key), DidYouMean(p.key, cacheKeys))
		}
	}
	si.s.Cache = c
}

// inputs decodes the files whose content is part of a cached step's key.
func (si *stepInfo) inputs(kv keyValue) {
	si.s.Inputs = si.pathList(kv.key, kv.v, nil)
}

// outputs decodes the files a cached step makes, saved with its result and
// restored when it comes from the cache.
func (si *stepInfo) outputs(kv keyValue) {
	si.s.Outputs = append(si.s.Outputs, si.pathList(kv.key, kv.v, si.s.Outputs)...)
}

// pathList decodes a list of relative file paths (templated), none twice
// and none already in have.
func (si *stepInfo) pathList(key string, n *yaml.Node, have []string) []string {
	items, ok := si.at.list(key, "file paths", n)
	if !ok {
		return nil
	}
	var out []string
	for _, item := range items {
		p, ok := si.at.nonEmpty(key, item)
		if !ok {
			continue
		}
		if msg := localPath(p, "the step's folder"); msg != "" {
			si.at.errf(item.Line, "%s: %q %s", key, snippet(p), msg)
			continue
		}
		if noOutputRef(si, key, item, p) {
			si.at.template(key, item, p, false)
		}
		p = filepath.Clean(p)
		if slices.Contains(out, p) || slices.Contains(have, p) {
			si.at.errf(item.Line, "%s lists %q twice; remove one", key, p)
			continue
		}
		out = append(out, p)
	}
	return out
}

// noOutputRef refuses {{outputs.STEP}} in a cache key or a path, which
// are rendered before any step runs. It reports whether there was none.
func noOutputRef(si *stepInfo, key string, n *yaml.Node, s string) bool {
	segs, err := template.Parse(s)
	if err != nil {
		return true // template reports it
	}
	none := true
	for _, sg := range segs {
		if _, _, ok := template.OutputRef(sg.Name); ok {
			si.at.errf(lineIn(deref(n), s, sg.Offset), "%s: {{%s}} names an upstream output; a cache key and its paths take vars and {{item}} only", key, sg.Name)
			none = false
		}
	}
	return none
}

// checkCache checks a step's cache:, inputs: and outputs: against its
// other keys.
func (l *loader) checkCache(si *stepInfo) {
	s, at := si.s, si.at
	if s.Cache == nil {
		for _, k := range []string{"inputs", "outputs"} {
			if line, ok := si.lineOf(k); ok {
				at.errf(line, "%s is read by the step's cache only; add cache: true, or remove it", k)
			}
		}
		return
	}
	line, _ := si.lineOf("cache")
	switch {
	case s.Handler != "":
		at.errf(line, "cache does not apply to an %s handler: it runs for the task's outcome, which its inputs do not show", s.Handler)
	case s.Foreach != nil && s.Foreach.Output != "":
		at.errf(line, "cache does not apply to a foreach over an output, whose instances are known only when it has run")
	}
}
