package stdlib

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"apollo/luart"
)

func TestExec(t *testing.T) {
	env := newFakeEnv(t)
	if err := os.MkdirAll(filepath.Join(env.workspace, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(env.workspace, "sub", "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, call, want string
	}{
		{"argv", `{"echo", "a b", "$HOME"}`, `{"code":0,"stdout":"a b $HOME\n","stderr":""}`},
		{"argv numbers", `{"echo", 1, 2.5}`, `{"code":0,"stdout":"1 2.5\n","stderr":""}`},
		{"sh -c", `"echo out; echo err >&2; exit 3"`, `{"code":3,"stdout":"out\n","stderr":"err\n"}`},
		{"non-zero exit", `{"false"}`, `{"code":1,"stdout":"","stderr":""}`},
		{"stdin", `{"cat"}, {stdin = "fed"}`, `{"code":0,"stdout":"fed","stderr":""}`},
		{"no stdin", `{"cat"}`, `{"code":0,"stdout":"","stderr":""}`},
		{"env", `"echo $APOLLO_X-$HOME", {env = {APOLLO_X = "y"}}`, `{"code":0,"stdout":"y-` + os.Getenv("HOME") + `\n","stderr":""}`},
		{"dir default workspace", `{"pwd"}`, `{"code":0,"stdout":"` + env.workspace + `\n","stderr":""}`},
		{"dir", `{"pwd"}, {dir = "sub"}`, `{"code":0,"stdout":"` + filepath.Join(env.workspace, "sub") + `\n","stderr":""}`},
		{"dir state", `{"pwd"}, {dir = "` + env.stateDir + `"}`, `{"code":0,"stdout":"` + env.stateDir + `\n","stderr":""}`},
		{"killed by a signal", `"kill -9 $$"`, `{"code":-1,"stdout":"","stderr":"","signal":"killed"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustRun(t, env, `return require("apollo.exec").run(`+tt.call+`)`)
			if !jsonEqual(t, got, tt.want) {
				t.Errorf("exec.run(%s) = %v\nwant %s", tt.call, got, tt.want)
			}
		})
	}
	for _, tt := range []struct{ name, call, want string }{
		{"not found", `{"/no/such/program"}`, "cannot start"},
		{"empty argv", `{}`, "argv table is empty"},
		{"empty string", `""`, "command is empty"},
		{"bad argv", `{"echo", {}}`, "argv[2] must be a string"},
		{"bad command", `42`, "command must be an argv table"},
		{"bad timeout", `{"true"}, {timeout = -1}`, "timeout must be a positive number"},
		{"bad env", `{"true"}, {env = {X = {}}}`, "env.X must be a string"},
		{"missing dir", `{"true"}, {dir = "nope"}`, "no such file"},
		{"dir a file", `"true", {dir = "sub/f"}`, "not a folder"},
		{"unknown option", `{"true"}, {timout = 1}`, `unknown option "timout" (the options are dir, env, stdin, timeout)`},
		{"option not named", `{"true"}, {1}`, `unknown option "1"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, env, `require("apollo.exec").run(`+tt.call+`)`, "exec.run", tt.want)
		})
	}
}

func TestExecOutputCap(t *testing.T) {
	env := newFakeEnv(t)
	got := mustRun(t, env, `
		local r = require("apollo.exec").run("head -c 17000000 /dev/zero")
		return {#r.stdout, r.stdout:find("output truncated", 1, true) ~= nil, r.code}
	`)
	want := `[16777216, true, 0]`
	if a, ok := got.([]any); ok && len(a) == 3 {
		if n, _ := a[0].(float64); n > MaxOutputBytes && n < MaxOutputBytes+200 {
			a[0] = float64(MaxOutputBytes)
		}
	}
	if !jsonEqual(t, got, want) {
		t.Errorf("capped output = %v, want %s", got, want)
	}
}

// groupGone reports whether process group pgid has no live member left, waiting for the
// kernel to deliver the SIGKILL (the wait is bounded; no timing is asserted). Zombies not yet
// reaped by init count as gone.
func groupGone(pgid int) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !groupAlive(pgid) {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

func groupAlive(pgid int) bool {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return !errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH)
	}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so split after the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 3 && f[2] == strconv.Itoa(pgid) && f[0] != "Z" && f[0] != "X" {
			return true
		}
	}
	return false
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func TestExecTimeoutKillsGroup(t *testing.T) {
	env := newFakeEnv(t)
	got := mustRun(t, env, `
		local r = require("apollo.exec").run("echo $$ > pid; echo started; sleep 30 & wait", {timeout = 0.3})
		return {r.code, r.timed_out, r.interrupted == nil, r.stdout}
	`)
	if !jsonEqual(t, got, `[-1, true, true, "started\n"]`) {
		t.Errorf("exec.run with timeout = %v", got)
	}
	if pgid := readPID(t, filepath.Join(env.workspace, "pid")); !groupGone(pgid) {
		t.Errorf("process group %d (the backgrounded sleep) is still alive", pgid)
	}
}

func TestExecTermIgnored(t *testing.T) {
	t.Parallel() // waits out grace periods of its own
	// A group member that ignores SIGTERM gets SIGKILL after the grace period.
	dir := t.TempDir()
	res, err := RunCommand(t.Context(), Command{
		Args:    []string{"/bin/sh", "-c", `echo $$ > pid; trap "" TERM; sleep 30 & wait`},
		Dir:     dir,
		Timeout: 100 * time.Millisecond,
		Grace:   200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if !res.TimedOut || res.Code != -1 {
		t.Errorf("RunCommand = %+v, want timed out with code -1", res)
	}
	if pgid := readPID(t, filepath.Join(dir, "pid")); !groupGone(pgid) {
		t.Errorf("process group %d is still alive", pgid)
	}
}

func TestExecContextCancel(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		// Cancel once the command has started.
		for {
			if _, err := os.Stat(filepath.Join(dir, "pid")); err == nil {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	res, err := RunCommand(ctx, Command{Args: []string{"/bin/sh", "-c", "echo $$ > pid.tmp; mv pid.tmp pid; sleep 30 & wait"}, Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Interrupted || res.TimedOut || res.Code != -1 {
		t.Errorf("RunCommand = %+v, want interrupted with code -1", res)
	}
	if pgid := readPID(t, filepath.Join(dir, "pid")); !groupGone(pgid) {
		t.Errorf("process group %d is still alive", pgid)
	}
}

// TestExecStepCancel cancels the step's context while a Lua step waits in exec.run: the
// command's group is killed and the state stops with the context's cause.
func TestExecStepCancel(t *testing.T) {
	env := newFakeEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	pidFile := filepath.Join(env.workspace, "pid")
	go func() {
		for {
			if _, err := os.Stat(pidFile); err == nil {
				cancel()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	_, err := runLuaCtx(t, ctx, env, `
		require("apollo.exec").run("echo $$ > pid.tmp; mv pid.tmp pid; sleep 30 & wait")
		require("apollo.fs").write("after.txt", "the script went on")
	`)
	var se *luart.StopError
	if !errors.As(err, &se) || !errors.Is(err, context.Canceled) {
		t.Errorf("run = %v, want a StopError for context.Canceled", err)
	}
	if pgid := readPID(t, pidFile); !groupGone(pgid) {
		t.Errorf("process group %d is still alive", pgid)
	}
	if _, err := os.Stat(filepath.Join(env.workspace, "after.txt")); err == nil {
		t.Errorf("the script went on after its context was cancelled")
	}
}

func TestExecStoppedBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := RunCommand(ctx, Command{Args: []string{"true"}}); err == nil {
		t.Errorf("RunCommand with an ended context started the command")
	}
}

// pidGone reports whether pid has ended, waiting for the kernel to deliver a signal sent to it
// (the wait is bounded; no timing is asserted). A zombie not yet reaped by init counts as gone.
func pidGone(pid int) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			return true
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if s := string(b); err == nil {
			if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X') {
				return true
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// TestExecEndsBackgroundProcesses: what a command leaves running in the background is ended
// when the command exits, and its result (with what it printed) comes back although the
// background process held the command's output pipes.
func TestExecEndsBackgroundProcesses(t *testing.T) {
	t.Parallel() // waits out grace periods of its own
	env := newFakeEnv(t)
	tests := []struct {
		name, call, want string
	}{
		{"holding stdout", `"sleep 100 & echo $! > bg.pid; echo hi"`, `{"code":0,"stdout":"hi\n","stderr":""}`},
		{"holding stderr, exit 3", `"sleep 100 >/dev/null & echo $! > bg.pid; echo oops >&2; exit 3"`, `{"code":3,"stdout":"","stderr":"oops\n"}`},
		{"stdin read in the background", `"cat >/dev/null & echo $! > bg.pid; echo hi", {stdin = string.rep("x", 1048576)}`, `{"code":0,"stdout":"hi\n","stderr":""}`},
		{"ignoring TERM", `"(trap '' TERM; sleep 100) & echo $! > bg.pid; echo hi"`, `{"code":0,"stdout":"hi\n","stderr":""}`},
		{"argv", `{"/bin/sh", "-c", "sleep 100 & echo $! > bg.pid"}`, `{"code":0,"stdout":"","stderr":""}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "ignoring TERM" && testing.Short() {
				t.Skip("-short: waits out the 2 s grace before SIGKILL (TestExecTermIgnored, with a short grace, stays); run without -short")
			}
			pidFile := filepath.Join(env.workspace, "bg.pid")
			os.Remove(pidFile)
			got := mustRun(t, env, `return require("apollo.exec").run(`+tt.call+`)`)
			if !jsonEqual(t, got, tt.want) {
				t.Errorf("exec.run(%s) = %v\nwant %s", tt.call, got, tt.want)
			}
			if pid := readPID(t, pidFile); !pidGone(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("exec.run(%s) returned with its background process %d still running", tt.call, pid)
			}
		})
	}
}

// taggedEnv is a fakeEnv whose commands carry tags, as the engine's do.
type taggedEnv struct {
	*fakeEnv
	tags []string
}

func (e *taggedEnv) ExecEnv() []string { return e.tags }

// TestExecTags: every command carries the attempt's tags, which a script's env cannot
// change (a resume finds what an attempt left running by them), and a tag of its own.
func TestExecTags(t *testing.T) {
	env := &taggedEnv{fakeEnv: newFakeEnv(t), tags: []string{"APOLLO_ATTEMPT=log#step#0"}}
	got := mustRun(t, env, `
		local r = require("apollo.exec").run("echo $APOLLO_ATTEMPT; env | grep -c '^APOLLO_EXEC_[0-9a-f]*=1$'",
			{env = {APOLLO_ATTEMPT = "forged"}})
		return r.stdout
	`)
	if got != "log#step#0\n1\n" {
		t.Errorf("the command saw APOLLO_ATTEMPT and its own tag as %q, want %q", got, "log#step#0\n1\n")
	}
}

// TestExecEndsEscapedProcesses: a process that left the command's process group (setsid)
// is ended too, when the command exits and when it times out, found by the command's tag.
func TestExecEndsEscapedProcesses(t *testing.T) {
	t.Parallel() // waits out grace periods of its own
	if runtime.GOOS != "linux" {
		t.Skip("processes that left the group are found through /proc")
	}
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid command")
	}
	env := newFakeEnv(t)
	// The process writes its pid once it has left the group, and the command waits for
	// that: ending the group earlier would end it too.
	const escape = `setsid sh -c 'echo $$ > bg.tmp; mv bg.tmp bg.pid; exec sleep 100'`
	const waitEscaped = `while [ ! -e bg.pid ]; do sleep 0.01; done`
	for _, tt := range []struct{ name, call string }{
		{"on exit", `"` + escape + ` >/dev/null 2>&1 </dev/null & ` + waitEscaped + `"`},
		{"on timeout", `"` + escape + ` >/dev/null 2>&1 </dev/null & ` + waitEscaped + `; sleep 30", {timeout = 1}`},
		{"holding stdout", `"` + escape + ` & ` + waitEscaped + `"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pidFile := filepath.Join(env.workspace, "bg.pid")
			os.Remove(pidFile)
			mustRun(t, env, `return require("apollo.exec").run(`+tt.call+`)`)
			if pid := readPID(t, pidFile); !pidGone(pid) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Errorf("exec.run(%s) returned with the process %d that left its group still running", tt.call, pid)
			}
		})
	}
}
