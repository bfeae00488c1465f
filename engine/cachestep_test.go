package engine

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"apollo/engine/cache"
	"apollo/engine/pipeline"
)

// cachedStep is a rendered step with cache:, inputs and outputs.
func cachedStep(command, key string, inputs, outputs []string) *renderedStep {
	rs := &renderedStep{step: &pipeline.Step{ID: "make", Command: command, Cache: &pipeline.Cache{Key: key}},
		command: command, cache: &renderedCache{key: key, inputs: inputs, outputs: outputs}}
	rs.defDigest = definitionDigest(rs)
	return rs
}

// TestCacheKey: the key changes with everything the result depends on, and
// with nothing else.
func TestCacheKey(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("data.csv", "a,b\n")
	up := map[string]string{"fetch": "sha256:01"}
	base := probeCache(cachedStep("cp data.csv out", "", []string{"data.csv"}, []string{"out"}), up, "", dir).key

	tests := []struct {
		name string
		key  func() string
		same bool
	}{
		{"unchanged", func() string {
			return probeCache(cachedStep("cp data.csv out", "", []string{"data.csv"}, []string{"out"}), up, "", dir).key
		}, true},
		{"another body", func() string {
			return probeCache(cachedStep("cp data.csv out2", "", []string{"data.csv"}, []string{"out"}), up, "", dir).key
		}, false},
		{"another cache.key", func() string {
			return probeCache(cachedStep("cp data.csv out", "v2", []string{"data.csv"}, []string{"out"}), up, "", dir).key
		}, false},
		{"another upstream output", func() string {
			return probeCache(cachedStep("cp data.csv out", "", []string{"data.csv"}, []string{"out"}),
				map[string]string{"fetch": "sha256:02"}, "", dir).key
		}, false},
		{"another secret", func() string {
			return probeCache(cachedStep("cp data.csv out", "", []string{"data.csv"}, []string{"out"}), up, "sha256:5e", dir).key
		}, false},
		{"another output list", func() string {
			return probeCache(cachedStep("cp data.csv out", "", []string{"data.csv"}, []string{"out", "more"}), up, "", dir).key
		}, false},
		{"another input content", func() string {
			write("data.csv", "c,d\n")
			defer write("data.csv", "a,b\n")
			return probeCache(cachedStep("cp data.csv out", "", []string{"data.csv"}, []string{"out"}), up, "", dir).key
		}, false},
		{"a missing input", func() string {
			os.Remove(filepath.Join(dir, "data.csv"))
			defer write("data.csv", "a,b\n")
			return probeCache(cachedStep("cp data.csv out", "", []string{"data.csv"}, []string{"out"}), up, "", dir).key
		}, false},
	}
	for _, tt := range tests {
		if got := tt.key(); (got == base) != tt.same {
			t.Errorf("%s: key %s, base %s: same = %v, want %v", tt.name, got, base, got == base, tt.same)
		}
	}
}

// TestMissReason: a miss names what changed since the step's newest result.
func TestMissReason(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "other.csv"), []byte("x\n"), 0o644)
	rs := cachedStep("cp data.csv out", "", []string{"data.csv"}, []string{"out"})
	up := map[string]string{"fetch": "sha256:01"}
	pr := probeCache(rs, up, "", dir)
	prev := func(edit func(e *cache.Entry)) *cache.Entry {
		e := &cache.Entry{Key: pr.key, InputDigest: pr.input, DefinitionDigest: rs.defDigest,
			Upstream: map[string]string{"fetch": "sha256:01"}, Inputs: append([]cache.File(nil), pr.inputs...)}
		edit(e)
		return e
	}
	tests := []struct {
		name string
		prev *cache.Entry
		want string
	}{
		{"no earlier result", nil, "no earlier result in the cache"},
		{"input changed", prev(func(e *cache.Entry) { e.Inputs[0].Digest = "sha256:00" }), "input data.csv changed"},
		{"input was missing", prev(func(e *cache.Entry) { e.Inputs[0].Digest = "" }), "input data.csv changed"},
		{"input is new", prev(func(e *cache.Entry) { e.Inputs = nil }), "input data.csv is new"},
		{"upstream changed", prev(func(e *cache.Entry) { e.Upstream["fetch"] = "sha256:02" }), "the output of step fetch changed"},
		{"definition changed", prev(func(e *cache.Entry) { e.DefinitionDigest = "sha256:99" }), "the step's definition changed"},
		{"cache.key changed", prev(func(e *cache.Entry) { e.UserKeyDigest = userKeyDigest("v0") }), "cache.key changed"},
		{"vars changed", prev(func(e *cache.Entry) { e.InputDigest = "sha256:98" }), "its inputs changed (vars, secrets or Lua files)"},
		{"two things", prev(func(e *cache.Entry) { e.Inputs[0].Digest = "sha256:00"; e.UserKeyDigest = userKeyDigest("v0") }),
			"input data.csv changed, cache.key changed"},
	}
	for _, tt := range tests {
		if got := missReason(tt.prev, pr, rs, nil); got != tt.want {
			t.Errorf("%s: missReason = %q, want %q", tt.name, got, tt.want)
		}
	}
	os.Remove(filepath.Join(dir, "data.csv"))
	gone := probeCache(rs, up, "", dir)
	if got := missReason(prev(func(*cache.Entry) {}), gone, rs, nil); !strings.Contains(got, "input data.csv is missing") {
		t.Errorf("missing input: missReason = %q, want it to say input data.csv is missing", got)
	}
}
