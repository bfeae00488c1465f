package container

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"apollo/engine/pipeline"
)

// fakeEngine puts an executable named podman on PATH, so that the command
// line is made as on a machine with the engine, without running it.
func fakeEngine(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "podman")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	return bin
}

// TestArgv: the engine's command line mounts the workspace at its own
// path, and the working directory and $APOLLO_OUTPUT's folder when they
// are outside it; passes the environment by name only (a value never
// shows in ps); labels the container with its attempt; never pulls; runs
// the resolved image id; and maps the step's settings to the engine's
// flags.
func TestArgv(t *testing.T) {
	bin := fakeEngine(t)
	ws, outside, extra := t.TempDir(), t.TempDir(), t.TempDir()
	at := &Attempt{
		Spec: &pipeline.Container{Image: "busybox:1", User: "1000", CPUs: "2", Memory: "256m", Network: "default",
			Mounts: []pipeline.Mount{{Source: extra, Target: "/data"}}},
		Name: Name("tag"), ImageID: "sha256:abc", Task: "t", Step: "s", Retry: 2,
		Workspace: ws, Dir: outside, Pass: []string{"TOKEN=s3cret", "TOKEN=again", "PLAIN=x"},
	}
	publish := filepath.Join(t.TempDir(), "s.2.out")
	c := Config{Flags: []string{"--runtime", "runc"}, RunFlags: []string{"--ulimit", "nofile=1024:1024"}}
	argv, err := c.Argv(at, publish, "echo hi")
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Join(argv, " ")
	for _, want := range []string{
		bin + " --runtime runc run --rm --name " + at.Name + " --pull never",
		"--label apollo.task=t --label apollo.step=s --label apollo.attempt=2",
		"--ulimit nofile=1024:1024",
		"-v " + ws + ":" + ws + ":rw",
		"-v " + outside + ":" + outside + ":rw",
		"-v " + filepath.Dir(publish) + ":" + filepath.Dir(publish) + ":rw",
		"-v " + extra + ":/data:ro",
		"-w " + outside,
		"-e TOKEN -e PLAIN -e APOLLO_OUTPUT",
		"--user 1000 --cpus 2 --memory 256m --network bridge",
		"sha256:abc sh -c echo hi",
	} {
		if !strings.Contains(line, want) {
			t.Errorf("the command line lacks %q:\n%s", want, line)
		}
	}
	if strings.Contains(line, "s3cret") {
		t.Errorf("a variable's value is on the command line:\n%s", line)
	}
	if n := strings.Count(line, "-e TOKEN"); n != 1 {
		t.Errorf("TOKEN passed %d times, want once", n)
	}
}

// TestArgvErrors: a mount whose source is gone, and a machine without the
// engine, are errors that say so; nothing is run.
func TestArgvErrors(t *testing.T) {
	fakeEngine(t)
	ws := t.TempDir()
	at := &Attempt{Spec: &pipeline.Container{Image: "busybox", Mounts: []pipeline.Mount{{Source: filepath.Join(ws, "gone"), Target: "/x"}}},
		Name: Name("tag"), Workspace: ws, Dir: ws}
	if _, err := (Config{}).Argv(at, "", "true"); err == nil || !strings.Contains(err.Error(), "mount") {
		t.Errorf("a missing mount source: %v, want an error naming the mount", err)
	}
	at.Spec.Mounts = nil
	if _, err := (Config{Engine: "docker"}).Argv(at, "", "true"); err == nil || !strings.Contains(err.Error(), "docker is not installed") {
		t.Errorf("no docker on PATH: %v, want an error saying it is not installed", err)
	}
}

// TestName: the same attempt tag names the same container wherever it is
// computed, another tag another one, and the name is one an engine takes.
func TestName(t *testing.T) {
	a, b := Name("apollo:/log#s#0"), Name("apollo:/log#s#1")
	if a != Name("apollo:/log#s#0") || a == b {
		t.Errorf("Name is not a function of the tag: %s, %s", a, b)
	}
	if !strings.HasPrefix(a, "apollo-") || strings.ContainsFunc(a, func(r rune) bool { return !(r == '-' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9') }) {
		t.Errorf("Name = %q, want apollo- and lower-case hex", a)
	}
}

// TestShellJoin: sh reads back every word as it was, quotes and spaces
// included.
func TestShellJoin(t *testing.T) {
	words := []string{"printf", "%s|", "plain", "two words", "it's", "", "$HOME", "a\nb", "--flag=x,y"}
	out, err := exec.Command("sh", "-c", ShellJoin(words)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), strings.Join(words[2:], "|")+"|"; got != want {
		t.Errorf("sh read %q, want %q", got, want)
	}
}

// TestEngineMessage: the engine's last error line in the output file is
// what a failed container's error quotes, bounded.
func TestEngineMessage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.log")
	os.WriteFile(path, []byte("pulling\nError: first\nmore\nError: image not known\n"), 0o644)
	if got := engineMessage(path); got != "Error: image not known" {
		t.Errorf("engineMessage = %q", got)
	}
	os.WriteFile(path, []byte("Error: "+strings.Repeat("x", 400)), 0o644)
	if got := engineMessage(path); len(got) != 303 || !strings.HasSuffix(got, "...") {
		t.Errorf("a long message is %d bytes, want it cut at 300", len(got))
	}
	if got := engineMessage(filepath.Join(t.TempDir(), "none")); got != "its message is in the step's output" {
		t.Errorf("no output file: %q", got)
	}
}
