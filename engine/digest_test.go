package engine

import (
	"math"
	"testing"
	"time"

	"apollo/engine/pipeline"
)

// TestDefinitionDigestStable: the definition digest is the one earlier
// versions recorded in TASK_START (the sha256 of definitionMap's JSON), for
// every kind of step, so upgrading apollo never makes a finished step look
// changed.
func TestDefinitionDigestStable(t *testing.T) {
	for _, rs := range digestSteps {
		if got, want := definitionDigest(rs), digestOf(definitionMap(rs)); got != want {
			t.Errorf("step %s: definition digest %s, want the map form's %s", rs.step.ID, got, want)
		}
	}
	// A value JSON cannot hold takes the same fallback as before.
	if got, want := definitionDigest(nanStep), digestOf(definitionMap(nanStep)); got != want {
		t.Errorf("NaN parameter: definition digest %s, want %s", got, want)
	}
}

// TestInputDigestStable: the input digest is the one earlier versions
// recorded in STEP_START and STEP_END (the sha256 of inputMap's JSON), so
// upgrading apollo never makes a finished step's inputs look changed.
func TestInputDigestStable(t *testing.T) {
	upstreams := []map[string]string{
		nil,
		{},
		{"extract": "sha256:0a1b"},
		{"z": "sha256:2", "a": "sha256:1", "m-<&>": "sha256:\u2028\"", "\u00e9t\u00e9": ""},
	}
	for _, rs := range append(digestSteps, nanStep) {
		for _, up := range upstreams {
			for _, secrets := range []string{"", "sha256:5ec3"} {
				if got, want := inputDigest(rs, up, secrets), digestOf(inputMap(rs, up, secrets)); got != want {
					t.Errorf("step %s, upstream %v, secrets %q: input digest %s, want the map form's %s", rs.step.ID, up, secrets, got, want)
				}
			}
		}
	}
}

// digestSteps cover every kind of step and every escape json.Marshal
// makes: quotes, backslashes, controls, HTML, U+2028/9, invalid UTF-8,
// non-ASCII, DEL.
var digestSteps = []*renderedStep{
	{step: &pipeline.Step{ID: "empty"}},
	{step: &pipeline.Step{ID: "shell", Command: "echo {{x}}", Timeout: 90 * time.Second, RetryPolicy: pipeline.RetryExponential, MaxRetries: 3},
		command: "echo 'a b'", cleanupCommand: "rm -f x", env: map[string]string{"B": "2", "A": "<&>\u2028"}},
	{step: &pipeline.Step{ID: "lua", Lua: "return {a = 1}", CleanupLua: "print('x')", MemoryMB: 64, Isolation: "process"},
		with: map[string]any{"z": 1, "a": []any{"x", 2.5, nil, map[string]any{"k": true}}}},
	{step: &pipeline.Step{ID: "script", Script: "s.lua", CleanupScript: "c.lua"}, env: map[string]string{}},
	{step: &pipeline.Step{ID: "uses", Uses: "notify_webhook"}, with: map[string]any{"url": "http://x/?a=1&b=2"}},
	{step: &pipeline.Step{ID: "escapes", Lua: "s = \"a\\b\"\n\tx\b\f\r\x01\x1f", Script: "<a>&b.lua", Uses: "caf\u00e9",
		CleanupLua: "\u2028\u2029\xff\xfe\x7f", RetryPolicy: "\U0001F600"},
		command: "echo '{{x}}' \"$y\" > out & wait", cleanupCommand: "\x00",
		env: map[string]string{"\u00e9": "\xc3", "K": "", "<": ">"}},
}

// nanStep has a parameter JSON cannot hold.
var nanStep = &renderedStep{step: &pipeline.Step{ID: "nan", Uses: "m"}, with: map[string]any{"x": math.NaN()}}
