package executor

import (
	"os"
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
