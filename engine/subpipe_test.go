package engine

import (
	"maps"
	"testing"

	"apollo/engine/pipeline"
)

func TestVarText(t *testing.T) {
	tests := []struct {
		in   any
		want string
	}{
		{"eu", "eu"}, {3, "3"}, {2.5, "2.5"}, {1e21, "1e+21"}, {true, "true"},
	}
	for _, tt := range tests {
		if got := varText(tt.in); got != tt.want {
			t.Errorf("varText(%v) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestInheritVars checks what a sub-pipeline is run with: the parent's
// variables it declares (and task_date), under its with: values.
func TestInheritVars(t *testing.T) {
	p := &pipeline.Pipeline{Vars: map[string]string{"region": "us", "size": "s"}}
	inherited := map[string]string{"region": "eu", "size": "m", "other": "x", "task_date": "2026-12-01"}
	got := inheritVars(p, inherited, map[string]string{"size": "big"})
	want := map[string]string{"region": "eu", "size": "big", "task_date": "2026-12-01"}
	if !maps.Equal(got, want) {
		t.Errorf("inheritVars() = %v, want %v", got, want)
	}
	if got := inheritVars(p, nil, map[string]string{"a": "b"}); !maps.Equal(got, map[string]string{"a": "b"}) {
		t.Errorf("inheritVars(no parent) = %v, want the --var values", got)
	}
}
