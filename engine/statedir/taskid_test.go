package statedir

import (
	"strings"
	"testing"
)

func TestValidTaskID(t *testing.T) {
	tests := []struct {
		id      string
		wantErr string
	}{
		{id: "daily-2024-01-02"},
		{id: "a"},
		{id: "A_b.c-d"},
		{id: "..."},
		{id: ".hidden"},
		{id: strings.Repeat("x", 200)},
		{id: "", wantErr: "task id is empty"},
		{id: ".", wantErr: `task id "." is not allowed: it names a folder`},
		{id: "..", wantErr: `task id ".." is not allowed: it names a folder`},
		{id: "a/b", wantErr: `task id "a/b" may only hold letters, digits, "_", "." and "-"`},
		{id: "/abs", wantErr: `task id "/abs" may only hold letters, digits, "_", "." and "-"`},
		{id: `a\b`, wantErr: `task id "a\\b" may only hold letters, digits, "_", "." and "-"`},
		{id: "a b", wantErr: `task id "a b" may only hold letters, digits, "_", "." and "-"`},
		{id: "a\x00", wantErr: `task id "a\x00" may only hold letters, digits, "_", "." and "-"`},
		{id: "ünï", wantErr: `task id "ünï" may only hold letters, digits, "_", "." and "-"`},
		{id: "-rf", wantErr: `task id "-rf" must not start with "-"`},
		{id: strings.Repeat("x", 201), wantErr: "task id is 201 bytes; the limit is 200"},
		{id: strings.Repeat("x", 300), wantErr: "task id is 300 bytes; the limit is 200"},
		{id: "p~load"},
		{id: "p~load~x"},
		{id: "~load", wantErr: `task id "~load" must not start with "~"`},
	}
	for _, tt := range tests {
		err := ValidTaskID(tt.id)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.wantErr {
			t.Errorf("ValidTaskID(%q) = %q, want %q", tt.id, got, tt.wantErr)
		}
	}
}

// A user's task id may not hold "~": it is the mark of a sub-pipeline's.
func TestValidUserTaskID(t *testing.T) {
	tests := []struct {
		id      string
		wantErr string
	}{
		{id: "daily-2024-01-02"},
		{id: "p.load"},
		{id: "p~load", wantErr: `task id "p~load" may not hold "~": it names the task of a sub-pipeline step`},
		{id: "a b", wantErr: `task id "a b" may only hold letters, digits, "_", "." and "-"`},
	}
	for _, tt := range tests {
		err := ValidUserTaskID(tt.id)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.wantErr {
			t.Errorf("ValidUserTaskID(%q) = %q, want %q", tt.id, got, tt.wantErr)
		}
	}
}
