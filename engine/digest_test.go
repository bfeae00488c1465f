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
	{step: &pipeline.Step{ID: "bash", Command: "x", Shell: []string{"bash"}}, command: "x"},
	{step: &pipeline.Step{ID: "interpreter", Command: "x", Shell: []string{"/opt/\u00e9 \"py\"", "-c"}}, command: "x"},
}

// TestShellDigests: a step's shell is part of its definition and input
// digests, and a step with the default shell (sh) digests as it did before
// shell: existed, so logs written then resume without a changed definition.
func TestShellDigests(t *testing.T) {
	plain := &renderedStep{step: &pipeline.Step{ID: "a", Command: "echo"}, command: "echo"}
	// The digests of this step as apollo wrote them before shell: existed.
	const oldDefinition = "sha256:3181349ea90bd90fbf65de04f8fb0abc75bdae7ca19cdf23f2d796733e0bd6cc"
	const oldInput = "sha256:4d4c212dcd69468237d3064982250351358033f2ea3f5fdbab7c6b16872dd66c"
	if got := definitionDigest(plain); got != oldDefinition {
		t.Errorf("definition digest %s, want %s as before", got, oldDefinition)
	}
	if got := inputDigest(plain, nil, ""); got != oldInput {
		t.Errorf("input digest %s, want %s as before", got, oldInput)
	}
	if _, has := definitionMap(plain)["shell"]; has {
		t.Errorf("the default shell adds a shell key to the definition digest")
	}
	if _, has := inputMap(plain, nil, "")["shell"]; has {
		t.Errorf("the default shell adds a shell key to the input digest")
	}
	for _, shell := range [][]string{{"bash"}, {"sh", "-c"}, {"python3", "-c"}} {
		rs := &renderedStep{step: &pipeline.Step{ID: "a", Command: "echo", Shell: shell}, command: "echo"}
		if definitionDigest(rs) == definitionDigest(plain) {
			t.Errorf("shell %q: same definition digest as the default", shell)
		}
		if inputDigest(rs, nil, "") == inputDigest(plain, nil, "") {
			t.Errorf("shell %q: same input digest as the default", shell)
		}
	}
}

// nanStep has a parameter JSON cannot hold.
var nanStep = &renderedStep{step: &pipeline.Step{ID: "nan", Uses: "m"}, with: map[string]any{"x": math.NaN()}}
