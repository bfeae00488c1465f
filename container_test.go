package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
)

// testImage is the image container scripts run: a root file system of
// Debian's busybox-static, imported into the engine (no registry is
// reachable where the tests run). It is built once per test process.
const testImage = "localhost/apollo-test-busybox:1"

var containerSetup struct {
	once     sync.Once
	skip     string // why container scripts skip, "" when they run
	flags    string // APOLLO_CONTAINER_FLAGS this machine needs
	runFlags string // APOLLO_CONTAINER_RUN_FLAGS this machine needs
}

// containerReady builds the test image and finds the run flags this
// machine's engine needs, once.
func containerReady() (skip, flags, runFlags string) {
	c := &containerSetup
	c.once.Do(func() {
		c.skip, c.flags, c.runFlags = buildTestImage()
		if c.skip != "" {
			fmt.Fprintf(os.Stderr, "container scripts skip: %s\n", c.skip)
		}
	})
	return c.skip, c.flags, c.runFlags
}

func buildTestImage() (skip, flags, runFlags string) {
	if _, err := exec.LookPath("podman"); err != nil {
		return "podman is not installed (.ci/run installs it: apt-get install podman runc busybox-static)", "", ""
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return "no /bin/busybox to build the test image from (apt-get install busybox-static)", "", ""
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	now := time.Now()
	for _, d := range []string{"bin/", "tmp/", "etc/"} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o1777, ModTime: now})
	}
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb)), ModTime: now})
	tw.Write(bb)
	for _, l := range []string{"sh", "echo", "cat", "sleep", "true", "false", "env", "ls", "id", "pwd", "touch", "rm", "mkdir", "trap"} {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + l, Linkname: "busybox", ModTime: now})
	}
	tw.Close()
	imp := exec.Command("podman", "import", "-", testImage)
	imp.Stdin = &tb
	if out, err := imp.CombinedOutput(); err != nil {
		return fmt.Sprintf("podman import failed: %v: %s", err, out), "", ""
	}
	// This machine's engine may refuse its own default resource limits
	// (a hard RLIMIT_NOFILE or RLIMIT_NPROC under the default), and crun
	// the hybrid cgroup layout: try without flags, then with explicit
	// limits, then with runc.
	for _, global := range []string{"", "--runtime runc"} {
		for _, run := range []string{"", "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024"} {
			args := append(strings.Fields(global), "run", "--rm")
			args = append(args, strings.Fields(run)...)
			out, err := exec.Command("podman", append(args, testImage, "true")...).CombinedOutput()
			if err == nil {
				return "", global, run
			}
			skip = fmt.Sprintf("podman cannot run a container here: %v: %s", err, bytes.TrimSpace(out))
		}
	}
	return skip, "", ""
}

// containerCondition is the scripts' [container] condition: podman can
// run the test image here. Scripts skip on [!container]; why is logged once.
func containerCondition() bool {
	skip, _, _ := containerReady()
	return skip == ""
}

// cmdNeedContainer sets a container script's environment up: the flags
// this machine's engine needs.
func cmdNeedContainer(ts *testscript.TestScript, neg bool, args []string) {
	skip, flags, runFlags := containerReady()
	if skip != "" {
		ts.Fatalf("no container engine: %s", skip)
	}
	ts.Setenv("APOLLO_CONTAINER_FLAGS", flags)
	ts.Setenv("APOLLO_CONTAINER_RUN_FLAGS", runFlags)
}

// cmdContainers prints the containers of a task, running or not, one name
// a line: containers TASK_ID.
func cmdContainers(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 1 {
		ts.Fatalf("usage: containers TASK_ID")
	}
	out, err := exec.Command("podman", "ps", "-a", "--filter", "label=apollo.task="+args[0], "--format", "{{.Names}}").Output()
	if err != nil {
		ts.Fatalf("podman ps: %v", err)
	}
	ts.Stdout().Write(out)
}
