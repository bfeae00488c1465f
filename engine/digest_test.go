package engine

import (
	"math"
	"testing"
	"time"
)

// TestDefinitionDigestStable: the definition digest is the one earlier
// versions recorded in TASK_START (the sha256 of definitionMap's JSON), for
// every kind of step, so upgrading apollo never makes a finished step look
// changed.
func TestDefinitionDigestStable(t *testing.T) {
	steps := []*renderedStep{
		{step: &Step{ID: "empty"}},
		{step: &Step{ID: "shell", Command: "echo {{x}}", Timeout: 90 * time.Second, RetryPolicy: RetryExponential, MaxRetries: 3},
			command: "echo 'a b'", cleanupCommand: "rm -f x", env: map[string]string{"B": "2", "A": "<&>\u2028"}},
		{step: &Step{ID: "lua", Lua: "return {a = 1}", CleanupLua: "print('x')", MemoryMB: 64, Isolation: "process"},
			with: map[string]any{"z": 1, "a": []any{"x", 2.5, nil, map[string]any{"k": true}}}},
		{step: &Step{ID: "script", Script: "s.lua", CleanupScript: "c.lua"}, env: map[string]string{}},
		{step: &Step{ID: "uses", Uses: "notify_webhook"}, with: map[string]any{"url": "http://x/?a=1&b=2"}},
		// Every escape json.Marshal makes: quotes, backslashes, controls,
		// HTML, U+2028/9, invalid UTF-8, non-ASCII, DEL.
		{step: &Step{ID: "escapes", Lua: "s = \"a\\b\"\n\tx\b\f\r\x01\x1f", Script: "<a>&b.lua", Uses: "caf\u00e9",
			CleanupLua: "\u2028\u2029\xff\xfe\x7f", RetryPolicy: "\U0001F600"},
			command: "echo '{{x}}' \"$y\" > out & wait", cleanupCommand: "\x00",
			env: map[string]string{"\u00e9": "\xc3", "K": "", "<": ">"}},
	}
	for _, rs := range steps {
		if got, want := definitionDigest(rs), digestOf(definitionMap(rs)); got != want {
			t.Errorf("step %s: definition digest %s, want the map form's %s", rs.step.ID, got, want)
		}
	}
	// A value JSON cannot hold takes the same fallback as before.
	nan := &renderedStep{step: &Step{ID: "nan", Uses: "m"}, with: map[string]any{"x": math.NaN()}}
	if got, want := definitionDigest(nan), digestOf(definitionMap(nan)); got != want {
		t.Errorf("NaN parameter: definition digest %s, want %s", got, want)
	}
}
