package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"apollo/engine/pipeline"
)

// TestDirectCommand: only a body that /bin/sh would run as one plain
// command found on the attempt's PATH runs without a shell; anything the
// shell would read differently, or run itself, keeps the shell.
func TestDirectCommand(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	for _, name := range []string{"prog", "echo"} {
		os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"), 0o755)
	}
	os.WriteFile(filepath.Join(bin, "data"), []byte("x"), 0o644) // not executable
	os.WriteFile(filepath.Join(dir, "local.sh"), []byte("#!/bin/sh\n"), 0o755)
	env := []string{"PATH=/nowhere", "PATH=" + bin, "HOME=/root"}
	tests := []struct {
		body  string
		shell []string
		want  string // the program run without a shell, "" for the shell
	}{
		{"prog", nil, filepath.Join(bin, "prog")},
		{"prog --day=2026-12-05 a.csv b_c,d+e@f%g:h", nil, filepath.Join(bin, "prog")},
		{"  prog  x\t\n", nil, filepath.Join(bin, "prog")},
		{"./local.sh x", nil, filepath.Join(dir, "local.sh")},
		{"prog", []string{pipeline.ShellBash}, ""}, // only the default shell is stood in for
		{"prog $HOME", nil, ""},
		{"prog 'a b'", nil, ""},
		{`prog "a"`, nil, ""},
		{`prog a\ b`, nil, ""},
		{"prog *.csv", nil, ""},
		{"prog ~/x", nil, ""},
		{"prog > out", nil, ""},
		{"prog | prog", nil, ""},
		{"prog; prog", nil, ""},
		{"prog && prog", nil, ""},
		{"prog &", nil, ""},
		{"prog # note", nil, ""},
		{"prog\nprog", nil, ""},
		{"prog `x`", nil, ""},
		{"prog $(x)", nil, ""},
		{"X=1 prog", nil, ""}, // an assignment for the command
		{"echo hi", nil, ""},  // the shell's own echo, whatever the PATH holds
		{"cd /", nil, ""},     // a builtin
		{"exit 3", nil, ""},   // a builtin
		{"if", nil, ""},       // a reserved word
		{"missing", nil, ""},  // not on the PATH: the shell says so, as it always has
		{"data", nil, ""},     // not executable
		{"bin", nil, ""},      // a folder
		{"./missing.sh", nil, ""},
		{"", nil, ""},
	}
	for _, tt := range tests {
		a := &Attempt{Step: &pipeline.Step{ID: "s", Shell: tt.shell}, Command: tt.body, Env: env, Dir: dir}
		prog, words, ok := directCommand(a)
		if tt.want == "" {
			if ok {
				t.Errorf("%q: runs %s %q without a shell, want the shell", tt.body, prog, words)
			}
			continue
		}
		if !ok || prog != tt.want || words[0] != strings.Fields(tt.body)[0] {
			t.Errorf("%q: %s %q, %v; want %s", tt.body, prog, words, ok, tt.want)
		}
	}
	// With no PATH in its environment the shell's own default applies.
	if _, _, ok := directCommand(&Attempt{Step: &pipeline.Step{ID: "s"}, Command: "prog", Env: []string{"HOME=/"}, Dir: dir}); ok {
		t.Errorf("no PATH: runs without a shell, want the shell")
	}
}

// TestDirectRun: a plain command runs after Started returned (pgid 0, its
// process not yet started), with its words, output, exit status and
// folder as under the shell; Running then names the group it leads. A
// program the kernel cannot run (a script without #!) still runs, through
// the shell.
func TestDirectRun(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "bare")
	os.WriteFile(script, []byte("echo bare ran in $(basename \"$PWD\") with $1\nexit 4\n"), 0o755)
	run := func(body string) (Result, string, []int, int) {
		t.Helper()
		out := filepath.Join(dir, "out.log")
		os.Remove(out)
		var started []int
		running := 0
		a := &Attempt{TaskID: "t", StepID: "s", Step: &pipeline.Step{ID: "s"}, Command: body, Direct: true,
			Env: []string{"PATH=" + os.Getenv("PATH"), AttemptEnv + "=direct-test"}, Dir: dir, OutputPath: out,
			KillGrace: time.Second,
			Started:   func(pgid int) error { started = append(started, pgid); return nil },
			Running:   func(pgid int) { running = pgid }}
		res := Shell{}.Run(t.Context(), a)
		b, _ := os.ReadFile(out)
		return res, string(b), started, running
	}
	res, out, started, running := run("printenv " + AttemptEnv)
	if res.Err != nil || out != "direct-test\n" {
		t.Errorf("printenv: %v, output %q; want the attempt's tag", res.Err, out)
	}
	if len(started) != 1 || started[0] != 0 || running <= 0 {
		t.Errorf("Started got %v, Running %d; want one Started(0) and then the group", started, running)
	}
	res, _, _, _ = run("false")
	if res.ExitCode != 1 || res.Err == nil || !strings.Contains(res.Err.Error(), "exit status 1") {
		t.Errorf("false: exit %d, %v; want exit status 1", res.ExitCode, res.Err)
	}
	res, out, started, _ = run("./bare x")
	if res.ExitCode != 4 || !strings.Contains(out, "bare ran in "+filepath.Base(dir)+" with x") || len(started) != 1 {
		t.Errorf("a script without #!: exit %d, output %q, Started %v; want it run by the shell, exit 4, one Started", res.ExitCode, out, started)
	}
	// Refused by Started: nothing runs.
	a := &Attempt{TaskID: "t", StepID: "s", Step: &pipeline.Step{ID: "s"}, Command: "touch made", Direct: true,
		Env: []string{"PATH=" + os.Getenv("PATH")}, Dir: dir, OutputPath: filepath.Join(dir, "o.log"), KillGrace: time.Second,
		Started: func(int) error { return os.ErrDeadlineExceeded }}
	if res := (Shell{}).Run(t.Context(), a); !res.NotStarted {
		t.Errorf("refused start: %+v, want NotStarted", res)
	}
	if _, err := os.Stat(filepath.Join(dir, "made")); err == nil {
		t.Errorf("the body ran although Started refused")
	}
}
