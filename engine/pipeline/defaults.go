package pipeline

import (
	"maps"
	"slices"
)

// settings decodes a mapping of step keys (those of allowed, through the
// step key table) that the top level sets for every step: defaults:, or
// the top-level env: and working_dir: on their own. It returns them with
// their lines.
func (l *loader) settings(kv keyValue, allowed []string) *stepInfo {
	si := &stepInfo{l: l, s: &Step{}, at: l.top(), line: kv.k.Line}
	pairs := []keyValue{kv}
	if kv.key == "defaults" {
		var ok bool
		if pairs, ok = si.at.mapping(kv.key, kv.v); !ok {
			return si
		}
	}
	for _, p := range pairs {
		i, known := stepIndex[p.key]
		switch {
		case known && slices.Contains(allowed, p.key):
			si.setLine(p.key, p.k.Line)
			stepFields[i].decode(si, p)
		case known || p.key == "pool":
			si.at.errf(p.k.Line, "defaults cannot set %s; it takes %s", p.key, andList(allowed))
		default:
			si.at.unknownKey(p.k, allowed, stepAliases)
		}
	}
	return si
}

// defaults decodes defaults: into l.p.Defaults. The top-level env: and
// working_dir: are merged in by applyDefaults, once the whole top level is
// read.
func (l *loader) defaults(kv keyValue) {
	l.def = l.settings(kv, defaultKeys)
}

// applyDefaults fills l.p.Defaults from defaults:, env: and working_dir:.
// A key given both ways is an error: one place says what steps get.
func (l *loader) applyDefaults() {
	d := &l.p.Defaults
	if si := l.def; si != nil {
		d.RetryPolicy, d.MaxRetries, d.Timeout, d.MemoryMB = si.s.RetryPolicy, si.s.MaxRetries, si.s.Timeout, si.s.MemoryMB
		d.Env, d.WorkingDir = maps.Clone(si.s.Env), si.s.WorkingDir
		d.Allow, d.HTTPHosts = si.s.Allow, si.s.HTTPHosts
		d.Shell = si.s.Shell
		d.Container = si.s.Container
	}
	for _, top := range []struct {
		si  *stepInfo
		key string
	}{{l.topEnv, "env"}, {l.topDir, "working_dir"}} {
		if top.si == nil {
			continue
		}
		if line, ok := l.defaultsSet(top.key); ok {
			l.top().errf(top.si.line, "%s is set twice: at the top level and under defaults (line %d); keep one", top.key, line)
			continue
		}
		if top.key == "env" {
			d.Env = maps.Clone(top.si.s.Env)
		} else {
			d.WorkingDir = top.si.s.WorkingDir
		}
	}
	// As on a step: retries without a policy would silently be none.
	if line, ok := l.defaultsSet("max_retries"); ok && d.MaxRetries > 0 {
		if _, has := l.defaultsSet("retry_policy"); !has {
			l.top().errf(line, "defaults.max_retries: %d has no effect without a retry_policy (the default is none); "+
				"add retry_policy: fixed or exponential under defaults", d.MaxRetries)
		}
	}
}

// defaultsSet returns the line of key under defaults:, and whether it is there.
func (l *loader) defaultsSet(key string) (int, bool) {
	if l.def == nil {
		return 0, false
	}
	return l.def.lineOf(key)
}

// checkTopRetries reports a top-level max_retries that retries nothing:
// no step of the pipeline has a retry policy, from defaults or its own.
func (l *loader) checkTopRetries() {
	line := l.maxRetriesLine
	if line == 0 || l.p.MaxRetries == 0 || len(l.p.Steps) == 0 {
		return
	}
	for _, s := range l.p.Steps {
		if s.RetryPolicy != RetryNone {
			return
		}
	}
	l.top().errf(line, "max_retries: %d has no effect: no step has a retry_policy (the default is none); "+
		"add defaults: {retry_policy: fixed} or retry_policy: to the steps that should retry", l.p.MaxRetries)
}
