package executor

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBodyPipes runs a body through bodyPipes with the kernel's pidfd and
// without it (the fallback for kernels before 5.3 and for macOS, which has
// none), waiting in this system's poll and in the portable one (poll(2)
// with a timeout in milliseconds, what macOS uses): stdout and stderr reach
// their writers whole, the exit is noticed while a background process
// still holds stdout, and drain gives up on that process at its deadline.
func TestBodyPipes(t *testing.T) {
	for _, c := range []struct {
		name      string
		withPidfd bool
		portable  bool
	}{
		{"pidfd", true, false},
		{"no-pidfd", false, false},
		{"pidfd/portable-poll", true, true},
		{"no-pidfd/portable-poll", false, true},
	} {
		withPidfd := c.withPidfd
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			p, err := openBodyPipes(&stdout, &stderr)
			if err != nil {
				t.Fatal(err)
			}
			defer p.close()
			if c.portable {
				p.portablePoll = true
			}
			pidfd := -1
			// 70 kB of stdout: more than a pipe holds, so the body blocks
			// unless it is read while it runs.
			cmd := exec.Command("/bin/sh", "-c", `sleep 30 2>/dev/null & echo "$!"; head -c 70000 /dev/zero | tr '\0' x; echo; echo oops >&2; exit 3`)
			cmd.Stdout, cmd.Stderr = p.w[0], p.w[1]
			cmd.SysProcAttr = startAttr(&pidfd) // no pidfd off Linux
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			p.closeWriters()
			if pidfd >= 0 {
				defer syscall.Close(pidfd)
			}
			if !withPidfd && pidfd >= 0 {
				syscall.Close(pidfd)
				pidfd = -1
			}
			p.untilExit(cmd.Process.Pid, pidfd)
			err = cmd.Wait()
			if code := exitCode(err); code != 3 {
				t.Fatalf("exit code %d (%v), want 3", code, err)
			}
			p.drain(time.Now().Add(200 * time.Millisecond))

			first, rest, _ := strings.Cut(stdout.String(), "\n")
			sleeper, err := strconv.Atoi(first)
			if err != nil {
				t.Fatalf("first line of stdout %q is not the background pid", first)
			}
			defer syscall.Kill(sleeper, syscall.SIGKILL)
			// The background sleep still holds stdout, and the body's end
			// was seen without waiting for it.
			if err := syscall.Kill(sleeper, 0); err != nil {
				t.Fatalf("background process %d is gone (%v): untilExit or drain waited for it", sleeper, err)
			}
			if want := strings.Repeat("x", 70000) + "\n"; rest != want {
				t.Errorf("stdout after the pid: %d bytes, want %d", len(rest), len(want))
			}
			if stderr.String() != "oops\n" {
				t.Errorf("stderr %q, want %q", stderr.String(), "oops\n")
			}
			if p.r[0] < 0 || p.r[1] >= 0 {
				t.Errorf("after drain: stdout fd %d (want open: the sleeper holds it), stderr fd %d (want closed)", p.r[0], p.r[1])
			}
		})
	}
}

// TestExited checks the pidfd fallback's test for an exited child: false
// while it runs, true once it has exited, and it does not reap the child.
func TestExited(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "read _ || :")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if exited(pid) {
		t.Fatal("exited reports a running child as exited")
	}
	in.Close()
	for !exited(pid) {
		time.Sleep(time.Millisecond)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("Wait after exited: %v (exited must not reap the child)", err)
	}
}
