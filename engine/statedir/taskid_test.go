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
