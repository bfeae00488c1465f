package pipeline

import (
	"slices"
	"testing"
)

// TestStepFields checks the step key table: it fits the key-line array,
// every key but id has a decoder, and the body and cleanup keys are the
// ones validation names.
func TestStepFields(t *testing.T) {
	if len(stepFields) > maxStepKeys {
		t.Fatalf("%d step keys; maxStepKeys is %d", len(stepFields), maxStepKeys)
	}
	for _, f := range stepFields {
		if (f.decode == nil) != (f.key == "id") {
			t.Errorf("step key %q: decoder set = %v", f.key, f.decode != nil)
		}
	}
	if want := []string{"command", "lua", "script", "uses", "run"}; !slices.Equal(bodyKeys, want) {
		t.Errorf("bodyKeys = %v, want %v", bodyKeys, want)
	}
	if want := []string{"cleanup_command", "cleanup_lua", "cleanup_script"}; !slices.Equal(cleanupKeys, want) {
		t.Errorf("cleanupKeys = %v, want %v", cleanupKeys, want)
	}
}
