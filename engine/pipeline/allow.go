package pipeline

import (
	"regexp"
	"slices"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"
)

// A Lua step runs with apollo.fs, idem, json, log and digest; apollo.exec
// and apollo.http are capabilities it is granted with allow: (or
// defaults.allow), http with an optional list of hosts. Validation scans
// what a step's Lua requires — its body or script file, its uses module
// (bundled modules declare theirs with a "-- needs: http" line) — and
// reports a capability it uses without the grant (docs/spec.md §6.8).

// Capabilities a step can be granted.
var capabilities = []string{"exec", "http"}

// allow decodes allow: a list of capabilities, http possibly as
// {http: [hosts]}.
func (si *stepInfo) allow(kv keyValue) {
	items, _ := si.at.list(kv.key, "capabilities", kv.v)
	si.s.Allow, si.s.HTTPHosts = []string{}, nil
	for _, item := range items {
		if item.Kind == yaml.MappingNode {
			kvs := si.at.pairs(item)
			if len(kvs) != 1 || kvs[0].key != "http" {
				si.at.errf(item.Line, "allow takes exec, http or {http: [hosts]}")
				continue
			}
			hosts, _ := si.at.list("allow.http", "hosts", kvs[0].v)
			si.s.HTTPHosts = []string{}
			for _, h := range hosts {
				if s, ok := si.at.nonEmpty("allow.http", h); ok {
					si.s.HTTPHosts = append(si.s.HTTPHosts, strings.ToLower(s))
				}
			}
			si.s.Allow = append(si.s.Allow, "http")
			continue
		}
		c, ok := si.at.nonEmpty(kv.key, item)
		if !ok {
			continue
		}
		if !slices.Contains(capabilities, c) {
			si.at.errf(item.Line, "allow: unknown capability %q%s; a step may be allowed exec and http",
				snippet(c), DidYouMean(c, capabilities))
			continue
		}
		if !slices.Contains(si.s.Allow, c) {
			si.s.Allow = append(si.s.Allow, c)
		}
	}
}

// capRequire matches require("apollo.exec") and require "apollo.http".
var capRequire = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`require\s*\(?\s*["']apollo\.(exec|http)["']`) })

// needsLine matches a module's "-- needs: exec, http" declaration (or
// "--- needs: http", in a doc comment, followed by anything).
var needsLine = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?m)^---?[ \t]*needs:[ \t]*([a-z]+(?:[ \t]*,[ \t]*[a-z]+)*)`)
})

// needs lists the capabilities a Lua source uses: what it requires, and
// what its "-- needs:" line declares.
func needs(src string) []string {
	var out []string
	for _, m := range capRequire().FindAllStringSubmatch(src, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	for _, m := range needsLine().FindAllStringSubmatch(src, -1) {
		for _, c := range strings.FieldsFunc(m[1], func(r rune) bool { return r == ',' || r == ' ' }) {
			if slices.Contains(capabilities, c) && !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	return out
}

// checkNeeds reports the capabilities src uses that step si was not granted.
func (si *stepInfo) checkNeeds(line int, what, src string) {
	for _, c := range needs(src) {
		if !slices.Contains(si.s.Allow, c) {
			si.at.errf(line, "%s uses apollo.%s, which the step is not allowed; add allow: [%s] to it (or to defaults:)", what, c, c)
		}
	}
}
