package engine

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"apollo/engine/pipeline"
)

// TestLoadRefsBeforeRun: apollo run refuses a missing script before it
// writes anything, with the same error as validation (Plan).
func TestLoadRefsBeforeRun(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte("task_name: t\nsteps:\n  - {id: a, command: \"true\"}\n  - {id: b, script: b.lua, depends_on: [a]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	e := New(Options{StateDir: state, Workdir: dir})
	runErr := e.Run(t.Context(), path, RunOptions{TaskID: "x"})
	_, planErr := e.Plan(path, RunOptions{TaskID: "x"})
	want := path + `:4: step "b": script "b.lua" does not exist (it is relative to the pipeline's folder); create it or fix the path`
	for _, err := range []error{runErr, planErr} {
		if err == nil || err.Error() != want {
			t.Errorf("error = %v, want %q", err, want)
		}
		if _, ok := errors.AsType[*pipeline.Error](err); !ok {
			t.Errorf("errors.As(%v, *pipeline.Error) = false", err)
		}
	}
	if _, err := os.Stat(state); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the state folder exists after a refused run (%v)", err)
	}
}
