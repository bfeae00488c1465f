package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
)

// digestOf is the sha256 of v's JSON encoding. encoding/json writes map keys
// sorted, so equal values give equal digests in every process.
func digestOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		// JSON cannot hold a YAML .nan or .inf; fmt prints maps sorted, so
		// this stays deterministic.
		b = []byte(fmt.Sprintf("%#v", v))
	}
	return sha256Hex(b)
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	var out [len("sha256:") + 2*sha256.Size]byte
	n := copy(out[:], "sha256:")
	hex.Encode(out[n:], sum[:])
	return string(out[:])
}

// definitionDigest digests what a step does, as rendered for this task: its
// body, cleanup, shell, environment, parameters, timeout and retry settings, and
// the content of the Lua files it loads (filesDigest). It
// leaves out the graph (depends_on, optional), which TASK_START records on
// its own: a new dependency does not make a finished result wrong.
//
// It hashes the bytes json.Marshal writes for definitionMap (keys sorted),
// so the digests recorded in existing logs stay valid, but writes them
// itself: a plan of 100,000 steps digests every one, and reflection was
// most of that time.
func definitionDigest(rs *renderedStep) string {
	s := rs.step
	var buf [512]byte
	b := buf[:0]
	field := func(key, value string) {
		b = append(b, key...)
		b = appendJSONString(b, value)
	}
	number := func(key string, n int64) {
		b = append(b, key...)
		b = strconv.AppendInt(b, n, 10)
	}
	field(`{"cleanup_command":`, rs.cleanupCommand)
	field(`,"cleanup_lua":`, s.CleanupLua)
	field(`,"cleanup_script":`, s.CleanupScript)
	field(`,"command":`, rs.command)
	b = append(b, `,"env":`...)
	b = appendStringMap(b, rs.env)
	if rs.filesDigest != "" { // keys added since the first format: only when set
		field(`,"files":`, rs.filesDigest)
	}
	if s.Container != nil { // keys added since the first format: only when set
		field(`,"image":`, containerDigestText(s.Container))
	}
	field(`,"isolation":`, s.Isolation)
	if s.Item != nil { // keys added since the first format: only when set
		b = append(b, `,"item":`...)
		b = appendStringMap(b, s.Item)
	}
	field(`,"lua":`, s.Lua)
	number(`,"max_retries":`, int64(s.MaxRetries))
	number(`,"memory_mb":`, int64(s.MemoryMB))
	field(`,"retry_policy":`, s.RetryPolicy)
	field(`,"script":`, s.Script)
	if s.Shell != nil { // keys added since the first format: only when set
		b = append(b, `,"shell":`...)
		b = appendStrings(b, s.Shell)
	}
	number(`,"timeout_ms":`, s.Timeout.Milliseconds())
	field(`,"uses":`, s.Uses)
	if s.When != "" { // keys added since the first format: only when set (see below)
		field(`,"when":`, s.When)
	}
	b = append(b, `,"with":`...)
	b, ok := appendParams(b, rs.with)
	if !ok {
		return digestOf(definitionMap(rs)) // a value JSON cannot hold: the same fallback as ever
	}
	// Keys added to the language since the first format are written only
	// when set, so that the digests of steps without them stay as they were.
	if s.WorkingDir != "" {
		field(`,"working_dir":`, s.WorkingDir)
	}
	b = append(b, '}')
	return sha256Hex(b)
}

// appendParams appends a step's `with` as json.Marshal writes it, or
// reports false for a value JSON cannot hold (a YAML .nan or .inf).
func appendParams(b []byte, with map[string]any) ([]byte, bool) {
	if with == nil {
		return append(b, "null"...), true
	}
	w, err := json.Marshal(with)
	if err != nil {
		return b, false
	}
	return append(b, w...), true
}

// appendStrings appends a list of strings as json.Marshal writes it.
func appendStrings(b []byte, list []string) []byte {
	b = append(b, '[')
	for i, v := range list {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, v)
	}
	return append(b, ']')
}

// appendStringMap appends m as json.Marshal writes it: keys sorted, null
// for a nil map.
func appendStringMap(b []byte, m map[string]string) []byte {
	if m == nil {
		return append(b, "null"...)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, m[k])
	}
	return append(b, '}')
}

// appendJSONString appends s as json.Marshal writes it. Printable ASCII
// other than " \ < > & is written as is; any other string is left to
// json.Marshal, so that its escapes (HTML, U+2028, invalid UTF-8) need no
// copy here.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// definitionMap is the definition digest's original form, kept as the
// reference definitionDigest must encode like.
func definitionMap(rs *renderedStep) map[string]any {
	s := rs.step
	m := map[string]any{
		"command":         rs.command,
		"lua":             s.Lua,
		"script":          s.Script,
		"uses":            s.Uses,
		"with":            rs.with,
		"cleanup_command": rs.cleanupCommand,
		"cleanup_lua":     s.CleanupLua,
		"cleanup_script":  s.CleanupScript,
		"env":             rs.env,
		"timeout_ms":      s.Timeout.Milliseconds(),
		"retry_policy":    s.RetryPolicy,
		"max_retries":     s.MaxRetries,
		"memory_mb":       s.MemoryMB,
		"isolation":       s.Isolation,
	}
	if s.WorkingDir != "" {
		m["working_dir"] = s.WorkingDir
	}
	if s.When != "" {
		m["when"] = s.When
	}
	if s.Item != nil {
		m["item"] = s.Item
	}
	if rs.filesDigest != "" {
		m["files"] = rs.filesDigest
	}
	if s.Shell != nil {
		m["shell"] = s.Shell
	}
	if s.Container != nil {
		m["image"] = containerDigestText(s.Container)
	}
	return m
}

// inputDigest digests what determines an attempt's result: the rendered
// body, environment and parameters, and the output digests of the steps it
// depends on. The attempt number is not part of it, so a step that succeeds
// on a retry has the same input digest as one that succeeds at once.
//
// Like definitionDigest, it hashes the bytes json.Marshal writes for its
// original form (inputMap) but writes them itself: it runs before every
// attempt, between one step's end and the next one's start.
func inputDigest(rs *renderedStep, upstream map[string]string, secrets string) string {
	ids := make([]string, 0, len(upstream))
	for id := range upstream {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	var buf [512]byte
	b := append(buf[:0], `{"body":`...)
	b = appendJSONString(b, rs.body())
	b = append(b, `,"env":`...)
	b = appendStringMap(b, rs.env)
	if rs.filesDigest != "" { // only when set, as in definitionDigest
		b = append(b, `,"files":`...)
		b = appendJSONString(b, rs.filesDigest)
	}
	if rs.step.Item != nil { // only when set, as in definitionDigest
		b = append(b, `,"item":`...)
		b = appendStringMap(b, rs.step.Item)
	}
	b = append(b, `,"params":`...)
	b, ok := appendParams(b, rs.with)
	if !ok {
		return digestOf(inputMap(rs, upstream, secrets)) // a value JSON cannot hold: the same fallback as ever
	}
	if secrets != "" { // only when set, as in definitionDigest
		b = append(b, `,"secrets":`...)
		b = appendJSONString(b, secrets)
	}
	if rs.step.Shell != nil { // only when set, as in definitionDigest
		b = append(b, `,"shell":`...)
		b = appendStrings(b, rs.step.Shell)
	}
	b = append(b, `,"upstream":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '[')
		b = appendJSONString(b, id)
		b = append(b, ',')
		b = appendJSONString(b, upstream[id])
		b = append(b, ']')
	}
	b = append(b, "]}"...)
	return sha256Hex(b)
}

// inputMap is the input digest's original form, kept as the reference
// inputDigest must encode like.
func inputMap(rs *renderedStep, upstream map[string]string, secrets string) map[string]any {
	ids := make([]string, 0, len(upstream))
	for id := range upstream {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	ups := make([][2]string, 0, len(ids))
	for _, id := range ids {
		ups = append(ups, [2]string{id, upstream[id]})
	}
	m := map[string]any{
		"body":     rs.body(),
		"env":      rs.env,
		"params":   rs.with,
		"upstream": ups,
	}
	if rs.step.Item != nil {
		m["item"] = rs.step.Item
	}
	if rs.filesDigest != "" {
		m["files"] = rs.filesDigest
	}
	if secrets != "" {
		m["secrets"] = secrets
	}
	if rs.step.Shell != nil {
		m["shell"] = rs.step.Shell
	}
	return m
}
