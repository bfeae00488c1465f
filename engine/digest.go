package engine

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
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
	return "sha256:" + hex.EncodeToString(sum[:])
}

// definitionDigest digests what a step does, as rendered for this task: its
// body, cleanup, environment, parameters, timeout and retry settings. It
// leaves out the graph (depends_on, optional), which TASK_START records on
// its own: a new dependency does not make a finished result wrong.
func definitionDigest(rs *renderedStep) string {
	s := rs.step
	b, err := json.Marshal(definitionFields{
		CleanupCommand: rs.cleanupCommand,
		CleanupLua:     s.CleanupLua,
		CleanupScript:  s.CleanupScript,
		Command:        rs.command,
		Env:            rs.env,
		Isolation:      s.Isolation,
		Lua:            s.Lua,
		MaxRetries:     s.MaxRetries,
		MemoryMB:       s.MemoryMB,
		RetryPolicy:    s.RetryPolicy,
		Script:         s.Script,
		TimeoutMS:      s.Timeout.Milliseconds(),
		Uses:           s.Uses,
		With:           rs.with,
	})
	if err != nil {
		return digestOf(definitionMap(rs)) // a value JSON cannot hold: the same fallback as ever
	}
	return sha256Hex(b)
}

// definitionFields is what a definition digest covers, as JSON. Its fields
// are in the order json.Marshal writes the keys of definitionMap (sorted),
// so both encode to the same bytes — the digests recorded in existing logs
// stay valid — while a struct encodes several times faster than a map.
type definitionFields struct {
	CleanupCommand string            `json:"cleanup_command"`
	CleanupLua     string            `json:"cleanup_lua"`
	CleanupScript  string            `json:"cleanup_script"`
	Command        string            `json:"command"`
	Env            map[string]string `json:"env"`
	Isolation      string            `json:"isolation"`
	Lua            string            `json:"lua"`
	MaxRetries     int               `json:"max_retries"`
	MemoryMB       int               `json:"memory_mb"`
	RetryPolicy    string            `json:"retry_policy"`
	Script         string            `json:"script"`
	TimeoutMS      int64             `json:"timeout_ms"`
	Uses           string            `json:"uses"`
	With           map[string]any    `json:"with"`
}

// definitionMap is the definition digest's original form, kept as the
// reference definitionFields must encode like.
func definitionMap(rs *renderedStep) map[string]any {
	s := rs.step
	return map[string]any{
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
}

// inputDigest digests what determines an attempt's result: the rendered
// body, environment and parameters, and the output digests of the steps it
// depends on. The attempt number is not part of it, so a step that succeeds
// on a retry has the same input digest as one that succeeds at once.
func inputDigest(rs *renderedStep, upstream map[string]string) string {
	ids := make([]string, 0, len(upstream))
	for id := range upstream {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	ups := make([][2]string, 0, len(ids))
	for _, id := range ids {
		ups = append(ups, [2]string{id, upstream[id]})
	}
	return digestOf(map[string]any{
		"body":     rs.body(),
		"env":      rs.env,
		"params":   rs.with,
		"upstream": ups,
	})
}
