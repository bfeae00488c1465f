package worker

import (
	"bytes"
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

// mustOpenRunning opens the running file of worker id in dir, closed when
// the test ends.
func mustOpenRunning(t *testing.T, dir, id string) *runningFile {
	t.Helper()
	r, err := openRunning(dir, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.close)
	return r
}

// TestEndLeftovers: a worker that starts ends the processes a dead
// worker's file names, and leaves a live worker's alone.
func TestEndLeftovers(t *testing.T) {
	dir := t.TempDir()
	live := mustOpenRunning(t, dir, "live:1")
	if _, err := openRunning(dir, "live:1"); err == nil {
		t.Fatal("a second worker opened the live worker's file")
	}

	// A dead worker: its file names an attempt whose process still runs,
	// by its group; another dead worker's names one by its tag alone (a
	// plain command's, whose start was reported before its process
	// existed).
	tag := "test-attempt-leftover"
	cmd, exited := startTagged(t, tag)
	if err := os.WriteFile(filepath.Join(dir, "dead-2.json"), []byte(`{"`+tag+`": `+strconv.Itoa(cmd.Process.Pid)+`}`), 0o644); err != nil {
		t.Fatal(err)
	}
	byTag := "test-attempt-by-tag"
	_, exitedByTag := startTagged(t, byTag)
	if err := os.WriteFile(filepath.Join(dir, "dead-4.json"), []byte(`{"groups": {"`+byTag+`": 0}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// A third dead worker's journal: an attempt added, another added and
	// removed, and a last line cut short by the machine's stop.
	journaled := "test-attempt-journaled"
	jcmd, exitedJournaled := startTagged(t, journaled)
	journal := `{"op":"add","tag":"` + journaled + `","pgid":` + strconv.Itoa(jcmd.Process.Pid) + "}\n" +
		`{"op":"add","tag":"gone","pgid":999998}` + "\n" + `{"op":"remove","tag":"gone"}` + "\n" + `{"op":"add","ta`
	if err := os.WriteFile(filepath.Join(dir, "dead-6.json"), []byte(journal), 0o644); err != nil {
		t.Fatal(err)
	}
	live.add("still-running", 999999, false, boxRef{})

	me := mustOpenRunning(t, dir, "me:3")
	if n, _ := me.endLeftovers(time.Second); n < 3 {
		t.Errorf("ended %d processes, want the dead workers' three", n)
	}
	for _, c := range []struct {
		what   string
		exited <-chan struct{}
	}{{"named by its group", exited}, {"named by its tag", exitedByTag}, {"named in a journal", exitedJournaled}} {
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			t.Errorf("the dead worker's process %s still runs", c.what)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "dead-2.json")); err == nil {
		t.Error("the dead worker's file is still there")
	}
	if _, err := os.Stat(live.path); err != nil {
		t.Errorf("the live worker's file: %v", err)
	}
}

// startTagged starts a process carrying attempt tag tag, leading its own
// group, and waits until its environment shows the tag; exited is closed
// when it ends. It is killed when the test ends.
func startTagged(t *testing.T, tag string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.Env = append(os.Environ(), executor.AttemptEnv+"="+tag)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { cmd.Process.Kill() })
	// Start returns once the exec has begun; the new image's environment
	// shows a moment later (sooner or later on a loaded machine). A dead
	// worker's attempt has been running for a while: wait for that.
	for deadline := time.Now().Add(10 * time.Second); len(stdlib.FindTagged(executor.AttemptEnv+"="+tag)) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the tagged process never showed its environment")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cmd, exited
}

// TestRunningFileByTag: an attempt recorded by its tag alone is in the
// file with no group, and leaves the file at its end.
func TestRunningFileByTag(t *testing.T) {
	dir := t.TempDir()
	r := mustOpenRunning(t, dir, "w:1")
	read := func() map[string]int {
		t.Helper()
		b, err := os.ReadFile(r.path)
		if err != nil {
			t.Fatal(err)
		}
		st, ok := readRunning(b)
		if !ok {
			t.Fatalf("the running file does not parse: %s", b)
		}
		return st.Groups
	}
	r.add("held", 0, false, boxRef{})
	if g := read(); len(g) != 0 {
		t.Errorf("an attempt with neither group nor tag to record is in the file: %v", g)
	}
	r.add("plain", 0, true, boxRef{})
	if g, ok := read()["plain"]; !ok || g != 0 {
		t.Errorf("the plain command's attempt: in the file %v, group %d; want in it with no group", ok, g)
	}
	r.remove("plain")
	if g := read(); len(g) != 0 {
		t.Errorf("after its end the file still names %v", g)
	}
}

// TestRunningJournalCompacts: a worker that runs many attempts keeps its
// running file short, and the file always says what runs.
func TestRunningJournalCompacts(t *testing.T) {
	dir := t.TempDir()
	r := mustOpenRunning(t, dir, "w:2")
	r.add("long", 4242, false, boxRef{})
	r.add("boxed", 0, false, boxRef{Name: "apollo-boxed"})
	for i := range 3 * compactAfter {
		tag := "short-" + strconv.Itoa(i)
		r.add(tag, 5000+i, false, boxRef{})
		r.remove(tag)
	}
	b, err := os.ReadFile(r.path)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n > compactAfter+2 {
		t.Errorf("after %d attempts the running file has %d lines", 3*compactAfter, n)
	}
	st, ok := readRunning(b)
	if !ok {
		t.Fatalf("the running file does not parse: %s", b)
	}
	if len(st.Groups) != 1 || st.Groups["long"] != 4242 {
		t.Errorf("the running file names the groups %v, want long's 4242 only", st.Groups)
	}
	if len(st.Containers) != 1 || st.Containers["boxed"].Name != "apollo-boxed" {
		t.Errorf("the running file names the containers %v, want boxed's", st.Containers)
	}
}
