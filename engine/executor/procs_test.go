package executor

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"apollo/stdlib"
)

// TestFindTagged finds a tagged process through this system's process
// table (/proc on Linux, sysctl on macOS), and leaves it out once it has
// exited and waits to be reaped.
func TestFindTagged(t *testing.T) {
	token := AttemptToken(t.TempDir()+"/log.jsonl", "find", 0)
	cmd := exec.Command("/bin/sh", "-c", "read _; exit 0")
	cmd.Env = append(os.Environ(), AttemptEnv+"="+token)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer in.Close()
	if got := stdlib.FindTagged(AttemptEnv + "=" + token); !slices.Equal(got, []int{cmd.Process.Pid}) {
		t.Errorf("findTagged while it runs = %v, want [%d]", got, cmd.Process.Pid)
	}
	if got := stdlib.FindTagged(AttemptEnv + "=" + token + "x"); len(got) != 0 {
		t.Errorf("findTagged(another token) = %v, want none", got)
	}
	in.Close()
	for !exited(cmd.Process.Pid) {
		time.Sleep(time.Millisecond)
	}
	if got := stdlib.FindTagged(AttemptEnv + "=" + token); len(got) != 0 {
		t.Errorf("findTagged after the exit, before the reaping = %v, want none", got)
	}
}
