package stdlib

import (
	"os/exec"
	"testing"
)

// TestReadEnvironDuringExec: a process caught inside an exec reads, for a moment, as having
// no environment. Read over and over while a tagged shell execs into sleep, its environment
// holds the tag every time until it has exited: the moment that would hide a process that
// left its group from endTagged is waited out.
func TestReadEnvironDuringExec(t *testing.T) {
	processes := 60
	if testing.Short() {
		processes = 15
	}
	const tag = "APOLLO_EXEC_TEST=1"
	misses := 0
	for range processes {
		cmd := exec.Command("sh", "-c", "exec sleep 0.01")
		cmd.Env = []string{tag}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pid := cmd.Process.Pid
		for {
			env, err := readEnviron(pid)
			if err != nil {
				break
			}
			if hasEnvEntry(env, tag) {
				continue
			}
			if st, ok := readProcStat(pid); ok && !st.exited() {
				misses++
			}
			break
		}
		cmd.Wait()
	}
	if misses > 0 {
		t.Errorf("%d of %d live processes read as untagged while they exec'd", misses, processes)
	}
}
