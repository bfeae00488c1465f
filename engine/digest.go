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
	return digestOf(map[string]any{
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
	})
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
