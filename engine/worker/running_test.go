package worker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"apollo/engine/executor"
	"apollo/stdlib"
)

// TestEndLeftovers: a worker that starts ends the processes a dead
// worker's file names, and leaves a live worker's alone.
func TestEndLeftovers(t *testing.T) {
	dir := t.TempDir()
	live, err := openRunning(dir, "live:1")
	if err != nil {
		t.Fatal(err)
	}
	defer live.close()
	if _, err := openRunning(dir, "live:1"); err == nil {
		t.Fatal("a second worker opened the live worker's file")
	}

	// A dead worker: its file names an attempt whose process still runs.
	tag := "test-attempt-leftover"
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), executor.AttemptEnv+"="+tag)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer cmd.Process.Kill()
	// Start returns once the exec has begun; the new image's environment
	// shows a moment later (sooner or later on a loaded machine). A dead
	// worker's attempt has been running for a while: wait for that.
	for deadline := time.Now().Add(10 * time.Second); len(stdlib.FindTagged(executor.AttemptEnv+"="+tag)) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the tagged process never showed its environment")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(dir, "dead-2.json"), []byte(`{"`+tag+`": `+strconv.Itoa(cmd.Process.Pid)+`}`), 0o644); err != nil {
		t.Fatal(err)
	}
	live.add("still-running", 999999, boxRef{})

	me, err := openRunning(dir, "me:3")
	if err != nil {
		t.Fatal(err)
	}
	defer me.close()
	if n, _ := me.endLeftovers(time.Second); n < 1 {
		t.Errorf("ended %d processes, want the dead worker's", n)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Error("the dead worker's process still runs")
	}
	if _, err := os.Stat(filepath.Join(dir, "dead-2.json")); err == nil {
		t.Error("the dead worker's file is still there")
	}
	if _, err := os.Stat(live.path); err != nil {
		t.Errorf("the live worker's file: %v", err)
	}
}
