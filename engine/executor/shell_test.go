package executor

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"apollo/engine/pipeline"
)

// TestShellOutputDiskFull: when the output file cannot be written (here
// /dev/full, as a full disk answers), the body still runs to its end and
// the attempt's note says how much output was lost and why.
func TestShellOutputDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("needs /dev/full")
	}
	a := &Attempt{TaskID: "t", StepID: "s", Step: &pipeline.Step{ID: "s"}, Command: "echo hello; echo world >&2",
		Dir: t.TempDir(), OutputPath: "/dev/full", Started: func(int) error { return nil }, KillGrace: time.Second}
	res := Shell{}.Run(t.Context(), a)
	if res.Err != nil {
		t.Fatalf("Run: %v", res.Err)
	}
	if !strings.Contains(res.Note, "12 bytes could not be written") || !strings.Contains(res.Note, "no space left on device") {
		t.Errorf("note = %q, want the 12 lost bytes and why", res.Note)
	}
}

// runBody runs body as shell (a Step.Shell) and returns the attempt's
// result and output.
func runBody(t *testing.T, shell []string, body string) (Result, string) {
	t.Helper()
	dir := t.TempDir()
	out := dir + "/out.log"
	a := &Attempt{TaskID: "t", StepID: "s", Step: &pipeline.Step{ID: "s", Shell: shell}, Command: body,
		Dir: dir, OutputPath: out, Started: func(int) error { return nil }, KillGrace: time.Second}
	res := Shell{}.Run(t.Context(), a)
	b, _ := os.ReadFile(out)
	return res, string(b)
}

// TestShellErrexit: the default shell stops at the first command that
// fails, keeps the body's line numbers in its messages, and fails a
// pipeline whose first command fails where /bin/sh has pipefail; an
// explicit "sh -c" runs the body as plain sh -c does.
func TestShellErrexit(t *testing.T) {
	body := "echo one\nfalse\necho two\n"
	res, out := runBody(t, nil, body)
	if res.ExitCode != 1 || out != "one\n" {
		t.Errorf("default shell: exit %d, output %q; want 1 and %q", res.ExitCode, out, "one\n")
	}
	res, out = runBody(t, []string{"sh", "-c"}, body)
	if res.Err != nil || out != "one\ntwo\n" {
		t.Errorf("sh -c: %v, output %q; want success and %q", res.Err, out, "one\ntwo\n")
	}
	res, out = runBody(t, nil, "true\n\nno-such-command-x\n")
	if res.ExitCode != 127 || !strings.Contains(out, "3: no-such-command-x") {
		t.Errorf("default shell: exit %d, output %q; want 127 and the error on line 3", res.ExitCode, out)
	}
	res, out = runBody(t, nil, "echo \"$?\"")
	if res.Err != nil || out != "0\n" {
		t.Errorf("default shell: $? at the start is %q (%v), want 0", out, res.Err)
	}
	// pipefail where /bin/sh has it.
	_, probe := runBody(t, []string{"sh", "-c"}, "if (set -o pipefail) 2>/dev/null; then echo yes; fi")
	res, out = runBody(t, nil, "false | true\necho went on\n")
	if probe == "yes\n" && (res.ExitCode != 1 || out != "") {
		t.Errorf("sh with pipefail: exit %d, output %q; want 1 and nothing", res.ExitCode, out)
	}
	if probe != "yes\n" && (res.Err != nil || out != "went on\n") {
		t.Errorf("sh without pipefail: %v, output %q; want success", res.Err, out)
	}
}

// TestShellInterpreters: bash gets -e -o pipefail; a command line gets the
// body as its last argument, held like any body (a program that is no
// POSIX shell through a /bin/sh that execs it).
func TestShellInterpreters(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	tests := []struct {
		shell    []string
		body     string
		wantCode int
		wantOut  string
	}{
		{[]string{"bash"}, "false | true\necho went on", 1, ""},
		{[]string{"bash"}, "[[ a == a ]] && echo $BASH_VERSINFO >/dev/null; echo ok", 0, "ok\n"},
		{[]string{"bash", "-c"}, "false\necho plain", 0, "plain\n"},
		{[]string{"bash", "-eu", "-c"}, "echo $NOT_SET_X\necho no", 1, "bash: line 1: NOT_SET_X: unbound variable\n"},
		{[]string{"env", "A=1", "sh", "-c"}, "echo $A $0", 0, "1 sh\n"},
	}
	for _, tt := range tests {
		res, out := runBody(t, tt.shell, tt.body)
		if res.ExitCode != tt.wantCode || out != tt.wantOut {
			t.Errorf("shell %q, body %q: exit %d (%v), output %q; want %d and %q",
				tt.shell, tt.body, res.ExitCode, res.Err, out, tt.wantCode, tt.wantOut)
		}
	}
	res, out := runBody(t, []string{"no-such-interpreter-x", "-c"}, "echo hi")
	if res.ExitCode != 127 || !strings.Contains(out, "no-such-interpreter-x: not found") {
		t.Errorf("a missing interpreter: exit %d, output %q; want 127 and why", res.ExitCode, out)
	}
}
