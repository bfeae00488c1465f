package textfmt

import (
	"bytes"
	"strings"
	"testing"
)

// TestMaskWriter writes text holding secrets in every split of two writes:
// each secret is masked whatever the split, nothing else changes.
func TestMaskWriter(t *testing.T) {
	m := NewMasker("hunter2", "s3cr3t-longer", "ab", "")
	text := "pw=hunter2; key=s3cr3t-longer and hunter hunter2x ab"
	want := "pw=***; key=*** and hunter ***x ab"
	for cut := 0; cut <= len(text); cut++ {
		var b bytes.Buffer
		w := m.Writer(&b)
		w.Write([]byte(text[:cut]))
		w.Write([]byte(text[cut:]))
		w.Close()
		if got := b.String(); got != want {
			t.Fatalf("split at %d: %q, want %q", cut, got, want)
		}
	}
	if got := m.String(text); got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
	var nilM *Masker
	if got := nilM.String(text); got != text {
		t.Errorf("a nil Masker changed the text: %q", got)
	}
	if NewMasker("", "x") != nil {
		t.Error("NewMasker of only short values is not nil")
	}
	if !strings.Contains(m.String("hunter"), "hunter") {
		t.Error("a prefix of a secret was masked")
	}
}
