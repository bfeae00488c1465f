package completion

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"apollo/engine/usage"
)

// completionCmds is a command table like apollo's, for the tests.
var completionCmds = []Command{
	{Name: "run", Summary: "run or resume a task", Args: ArgPipeline, Flags: []Flag{
		{Name: "dry-run", Usage: "print the plan (keep / rerun) and write nothing"},
		{Name: "help", Short: "h", Usage: "show this help"},
		{Name: "progress", Usage: "progress display: auto or plain", Value: ValueAny, Values: []string{"auto", "plain"}},
		{Name: "state-dir", Usage: "folder for logs", Value: ValueDir},
		{Name: "task-id", Usage: "name the task run", Value: ValueTask},
		{Name: "var", Usage: "set a template variable (repeatable): --var k=v", Value: ValueAny},
	}},
	{Name: "logs", Summary: "print a run's events", Args: ArgTask, Flags: []Flag{
		{Name: "attempt", Usage: "the attempt's output", Value: ValueAny},
		{Name: "follow", Short: "f", Usage: "follow a live run"},
		{Name: "state-dir", Usage: "folder for logs", Value: ValueDir},
	}},
	{Name: "script", Summary: "run a recovery script", Args: ArgLua},
	{Name: "completion", Summary: "print a completion script", Args: ArgWords, Words: Shells},
	{Name: "version", Summary: "print apollo's version"},
}

// TestCompletionBash loads the bash script into a real bash and asks it
// to complete command lines, with a fake apollo on PATH that lists task
// ids (and says which --state-dir it was given).
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Fatalf("bash is needed to test bash completion: %v", err)
	}
	dir := t.TempDir()
	var script bytes.Buffer
	if err := Write(&script, "bash", completionCmds); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "apollo.bash"), script.Bytes())
	writeFile(t, filepath.Join(dir, "bin", "apollo"), []byte("#!/bin/sh\n"+
		`[ "$1 $2 $3" = "list --ids --all" ] || exit 2`+"\n"+
		`echo "task_1"; echo "task_2"; [ -n "$5" ] && echo "from_$5"`+"\n"))
	if err := os.Chmod(filepath.Join(dir, "bin", "apollo"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"p.yaml", "q.yml", "notes.txt", "fix.lua", "sub/x.yaml"} {
		writeFile(t, filepath.Join(dir, "work", f), nil)
	}
	tests := []struct {
		line string // the words; the last one is being completed
		want string
	}{
		{"apollo ''", "run logs script completion version help"},
		{"apollo r", "run"},
		{"apollo run ''", "p.yaml q.yml sub"},
		{"apollo run --dry-run ''", "p.yaml q.yml sub"},
		{"apollo run p.yaml ''", ""},
		{"apollo run --", "--dry-run --help --progress --state-dir --task-id --var"},
		{"apollo run -", "--dry-run --help -h --progress --state-dir --task-id --var"},
		{"apollo run --progress ''", "auto plain"},
		{"apollo run --task-id ''", "task_1 task_2"},
		{"apollo run --state-dir ''", "sub"},
		{"apollo run --var ''", ""},
		{"apollo logs ''", "task_1 task_2"},
		{"apollo logs task_''", "task_1 task_2"},
		{"apollo logs --state-dir /x ''", "task_1 task_2 from_/x"},
		{"apollo logs --attempt 2 ''", "task_1 task_2"},
		{"apollo logs -f task_1 ''", ""},
		{"apollo script ''", "fix.lua sub"},
		{"apollo completion ''", "bash zsh fish"},
		{"apollo help ''", "run logs script completion version"},
		{"apollo version ''", ""},
	}
	var driver strings.Builder
	driver.WriteString("cd work\nsource ../apollo.bash\n")
	for _, tt := range tests {
		driver.WriteString("COMP_WORDS=(" + tt.line + "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _apollo\n")
		driver.WriteString(`printf '%s\n' "$(printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ')"` + "\n")
	}
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", driver.String())
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, stderr.String())
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(got) != len(tests) {
		t.Fatalf("bash printed %d lines for %d cases:\n%s\n%s", len(got), len(tests), out, stderr.String())
	}
	for i, tt := range tests {
		want := strings.Fields(tt.want)
		sort.Strings(want)
		if g := strings.Fields(got[i]); strings.Join(g, " ") != strings.Join(want, " ") {
			t.Errorf("complete %s = %q, want %q", tt.line, g, want)
		}
	}
}

// TestCompletionScriptsNameEverything checks that each script offers every
// command and flag, and the file kinds and task ids.
func TestCompletionScriptsNameEverything(t *testing.T) {
	for _, shell := range Shells {
		var b bytes.Buffer
		if err := Write(&b, shell, completionCmds); err != nil {
			t.Fatal(err)
		}
		s := b.String()
		want := []string{"apollo list --ids --all", "yaml", "yml", ".lua", "bash zsh fish"}
		for _, c := range completionCmds {
			want = append(want, c.Name)
			for _, f := range c.Flags {
				want = append(want, f.Name)
			}
		}
		for _, w := range want {
			if !strings.Contains(s, w) {
				t.Errorf("%s script lacks %q", shell, w)
			}
		}
		// The summaries' quotes are escaped for the shell.
		quoted := map[string]string{"zsh": `print a run'\''s events`, "fish": `print a run\'s events`}
		if q, ok := quoted[shell]; ok && !strings.Contains(s, q) {
			t.Errorf("%s script lacks the summary %q", shell, q)
		}
	}
}

func TestCompletionUnknownShell(t *testing.T) {
	var ue *usage.Error
	err := Write(&bytes.Buffer{}, "bsh", completionCmds)
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `did you mean "bash"?`) {
		t.Errorf("Write(bsh) = %v, want a UsageError suggesting bash", err)
	}
}

// writeFile creates path, and its folder, holding data.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	err := os.MkdirAll(filepath.Dir(path), 0o755)
	if err == nil {
		err = os.WriteFile(path, data, 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
}
