package pipeline

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestShellKey checks what shell: makes of each way it is written, on a
// step and under defaults.
func TestShellKey(t *testing.T) {
	tests := []struct {
		name, defaults, step string
		want                 []string
	}{
		{"absent", "", "", nil},
		{"sh is the default", "", "shell: sh", nil},
		{"bash", "", "shell: bash", []string{"bash"}},
		{"a command line", "", `shell: "python3  -c"`, []string{"python3", "-c"}},
		{"plain sh", "", `shell: sh -c`, []string{"sh", "-c"}},
		{"a list", "", `shell: [bash, -eu, -o, pipefail, -c]`, []string{"bash", "-eu", "-o", "pipefail", "-c"}},
		{"from defaults", "defaults: {shell: bash}\n", "", []string{"bash"}},
		{"a step's own over defaults", "defaults: {shell: bash}\n", "shell: sh", nil},
	}
	for _, tt := range tests {
		src := "task_name: t\n" + tt.defaults + "steps:\n  - id: a\n    command: echo\n"
		if tt.step != "" {
			src += "    " + tt.step + "\n"
		}
		p, err := parse("pipeline.yaml", "/x", []byte(src), LoadOptions{})
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if got := p.Steps[0].Shell; !slices.Equal(got, tt.want) {
			t.Errorf("%s: Shell = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestShellText(t *testing.T) {
	tests := []struct {
		in   []string
		want string
	}{
		{nil, "sh"},
		{[]string{"bash"}, "bash"},
		{[]string{"python3", "-c"}, "python3 -c"},
		{[]string{"/opt/my tools/run", "-c"}, `"/opt/my tools/run" -c`},
	}
	for _, tt := range tests {
		if got := ShellText(tt.in); got != tt.want {
			t.Errorf("ShellText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestFindShell checks the interpreter's lookup: on the PATH by name, by
// path relative to where the step runs.
func TestFindShell(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "plain"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		shell []string
		want  string // a part of the error, "" for none
	}{
		{nil, ""},
		{[]string{"sh", "-c"}, ""},
		{[]string{"./run", "-c"}, ""},
		{[]string{filepath.Join(dir, "run"), "-c"}, ""},
		{[]string{"no-such-interpreter-x", "-c"}, `"no-such-interpreter-x" is not found on the PATH`},
		{[]string{"./missing", "-c"}, `"./missing" does not exist`},
		{[]string{"./plain", "-c"}, `"./plain" is not an executable file`},
	}
	for _, tt := range tests {
		err := FindShell(tt.shell, dir)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("FindShell(%q) = %v, want nil", tt.shell, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("FindShell(%q) = %v, want an error with %q", tt.shell, err, tt.want)
		}
	}
}
