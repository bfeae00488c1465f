package stdlib

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// MaxOutputBytes is how much of a command's stdout, and of its stderr, exec.run keeps. The
// rest is counted and dropped, and a note says how much.
const MaxOutputBytes = 16 << 20

// KillGrace is how long exec.run waits after SIGTERM before it sends SIGKILL to the process
// group of a command it stops.
const KillGrace = 2 * time.Second

// drainDelay bounds how long exec.run waits for the output pipes once the command's process
// group is gone: a process that left the group (setsid) and keeps them open does not hold
// the step.
const drainDelay = 2 * time.Second

func (lib *library) execFuncs() map[string]lua.LGFunction {
	return map[string]lua.LGFunction{"run": lib.execRun}
}

// Command is what exec.run runs.
type Command struct {
	Args    []string      // argv; a shell string is {"/bin/sh", "-c", s}
	Dir     string        // absolute working folder
	Env     []string      // added to the process's environment ("K=V")
	Stdin   string        // fed to standard input
	Timeout time.Duration // 0: none (the context still applies)
	// Grace is the time between SIGTERM and SIGKILL when the command's
	// processes are ended; 0 means KillGrace.
	Grace time.Duration
	// Start starts the command (cmd.Start when nil); see CommandStarter.
	Start func(cmd *exec.Cmd) error
}

// CommandResult is how a command ended.
type CommandResult struct {
	Code        int    // exit status; -1 when killed by a signal or stopped
	Stdout      string // capped at MaxOutputBytes, with a note when cut
	Stderr      string
	TimedOut    bool   // stopped by Command.Timeout
	Interrupted bool   // stopped because ctx ended
	Signal      string // the signal that ended it, if one did ("killed")
}

// RunCommand runs c in its own process group. When c.Timeout expires or ctx ends, the whole
// group gets SIGTERM, then SIGKILL after c.Grace, so grandchildren (`sleep 30 & wait`) die
// too. When the command itself exits, what it left running in its group (`sleep 100 &`) is
// ended the same way. Every process of the command also carries a variable of its own
// (APOLLO_EXEC_<random>=1, after c.Env); on Linux, the processes that carry it and left the
// group (setsid, daemons) are then found in /proc and ended too. So nothing a command starts
// outlives RunCommand, unless it left the group and also cleared its environment. A non-zero
// exit is a result, not an error; the error is for a command that could not start.
func RunCommand(ctx context.Context, c Command) (CommandResult, error) {
	if len(c.Args) == 0 {
		return CommandResult{}, errors.New("empty command")
	}
	if err := ctx.Err(); err != nil {
		return CommandResult{}, fmt.Errorf("the step was stopped: %w", context.Cause(ctx))
	}
	// The pipes are the command's own files, not ones os/exec copies through: Wait returns
	// when the command exits, even while a background process holds them, so that the group
	// can be ended and the pipes drained after it.
	p, err := openPipes()
	if err != nil {
		return CommandResult{}, err
	}
	cmd := exec.Command(c.Args[0], c.Args[1:]...)
	cmd.Dir = c.Dir
	tag := newExecTag()
	cmd.Env = append(append(os.Environ(), c.Env...), tag)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = p.inR, p.outW, p.errW
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := cmd.Start
	if c.Start != nil {
		start = func() error { return c.Start(cmd) }
	}
	startErr := start()
	p.closeChildEnds()
	if startErr != nil {
		p.closeOwnEnds()
		return CommandResult{}, startErr
	}
	pgid := cmd.Process.Pid

	stdout, stderr := &cappedBuffer{max: MaxOutputBytes}, &cappedBuffer{max: MaxOutputBytes}
	var copies sync.WaitGroup
	copies.Go(func() { io.Copy(stdout, p.outR) })
	copies.Go(func() { io.Copy(stderr, p.errR) })
	go func() {
		// Errors are the command's business: it may exit without reading its input.
		io.WriteString(p.inW, c.Stdin)
		p.inW.Close()
	}()

	var (
		mu     sync.Mutex
		reason string // "timeout" or "interrupt" once stopping began
	)
	grace := c.Grace
	if grace <= 0 {
		grace = KillGrace
	}
	exited := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		var timer <-chan time.Time
		if c.Timeout > 0 {
			t := time.NewTimer(c.Timeout)
			defer t.Stop()
			timer = t.C
		}
		select {
		case <-exited:
			return
		case <-ctx.Done():
			mu.Lock()
			reason = "interrupt"
			mu.Unlock()
		case <-timer:
			mu.Lock()
			reason = "timeout"
			mu.Unlock()
		}
		syscall.Kill(-pgid, syscall.SIGTERM)
		graceTimer := time.NewTimer(grace)
		defer graceTimer.Stop()
		select {
		case <-exited:
		case <-graceTimer.C:
		}
		// After TERM the group is killed in any case: a member that outlived the leader is
		// not left behind.
		syscall.Kill(-pgid, syscall.SIGKILL)
	}()
	werr := cmd.Wait()
	close(exited)
	<-stopped
	EndGroup(pgid, grace)
	endTagged(tag, grace)
	// The group is gone; a process that left it may still hold the pipes.
	deadline := time.Now().Add(drainDelay)
	p.outR.SetReadDeadline(deadline)
	p.errR.SetReadDeadline(deadline)
	copies.Wait()
	p.closeOwnEnds() // also ends a write of stdin that nobody reads

	res := CommandResult{Code: -1, Stdout: stdout.String(), Stderr: stderr.String()}
	if ps := cmd.ProcessState; ps != nil {
		res.Code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.Signal = ws.Signal().String()
		}
	}
	switch reason {
	case "timeout":
		res.TimedOut, res.Code = true, -1
	case "interrupt":
		res.Interrupted, res.Code = true, -1
	}
	var ee *exec.ExitError
	if werr != nil && !errors.As(werr, &ee) && cmd.ProcessState == nil {
		return res, werr
	}
	return res, nil
}

// EndGroup ends what is left of a process group whose leader has exited (a shell step's or
// an exec command's): SIGTERM, then SIGKILL to whatever is still there after grace.
func EndGroup(pgid int, grace time.Duration) {
	if pgid <= 0 || !GroupLive(pgid) {
		return
	}
	syscall.Kill(-pgid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for GroupLive(pgid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

// GroupLive reports whether process group pgid has a member that has not exited. A member
// that exited stays a zombie until init reaps it, which some inits are slow to do (or never
// do): it holds nothing and is not waited for. Where zombies cannot be told apart (no /proc),
// any member counts.
func GroupLive(pgid int) bool {
	if syscall.Kill(-pgid, 0) != nil {
		return false
	}
	return groupHasLiveMember(pgid)
}

// execTagPrefix starts the name of the variable that tags every process of one exec.run
// command, "APOLLO_EXEC_<random>=1". The name, not only the value, is random, so a command
// that runs apollo, whose own exec.run adds its tag, keeps the outer one too.
const execTagPrefix = "APOLLO_EXEC_"

// newExecTag returns a fresh tag for one command.
func newExecTag() string {
	return fmt.Sprintf("%s%016x=1", execTagPrefix, rand.Uint64())
}

// endTagged ends every live process carrying the tag: SIGTERM, then SIGKILL after grace to
// those still there. These are processes a command started that left its process group
// (setsid, a double fork into a new session) and so outlived the group's ending. It finds
// them where the system shows other processes' environments (Linux's /proc); elsewhere it
// finds none.
func endTagged(tag string, grace time.Duration) {
	pids := findTagged(tag)
	if len(pids) == 0 {
		return
	}
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	for len(pids) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		pids = findTagged(tag)
	}
	for _, pid := range findTagged(tag) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// pipes are a command's standard input, output and error.
type pipes struct {
	inR, inW, outR, outW, errR, errW *os.File
}

func openPipes() (*pipes, error) {
	var p pipes
	var err error
	if p.inR, p.inW, err = os.Pipe(); err == nil {
		if p.outR, p.outW, err = os.Pipe(); err == nil {
			p.errR, p.errW, err = os.Pipe()
		}
	}
	if err != nil {
		p.closeChildEnds() // closing a nil *os.File is a harmless error
		p.closeOwnEnds()
		return nil, fmt.Errorf("open pipes: %w", err)
	}
	return &p, nil
}

// closeChildEnds closes the ends the command holds, once it has them (or failed to start).
func (p *pipes) closeChildEnds() {
	p.inR.Close()
	p.outW.Close()
	p.errW.Close()
}

// closeOwnEnds closes the ends RunCommand writes stdin to and reads the output from.
func (p *pipes) closeOwnEnds() {
	p.inW.Close()
	p.outR.Close()
	p.errR.Close()
}

// cappedBuffer keeps the first max bytes written to it and counts the rest. Writes never
// fail, so the command does not see a broken pipe.
type cappedBuffer struct {
	mu      sync.Mutex
	max     int
	buf     []byte
	dropped int64
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - len(b.buf)
	if room >= len(p) {
		b.buf = append(b.buf, p...)
	} else {
		if room > 0 {
			b.buf = append(b.buf, p[:room]...)
		}
		b.dropped += int64(len(p) - max(room, 0))
	}
	return len(p), nil
}

func (b *cappedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dropped == 0 {
		return string(b.buf)
	}
	return string(b.buf) + fmt.Sprintf("\n[apollo.exec: output truncated at %d MiB; %d more bytes dropped]\n", b.max>>20, b.dropped)
}

func (lib *library) execRun(L *lua.LState) int {
	const fn = "exec.run"
	var c Command
	switch v := L.Get(1).(type) {
	case lua.LString:
		if v == "" {
			argError(L, fn, 1, "command is empty")
		}
		c.Args = []string{"/bin/sh", "-c", string(v)}
	case *lua.LTable:
		n := v.Len()
		if n == 0 {
			argError(L, fn, 1, "argv table is empty")
		}
		for i := 1; i <= n; i++ {
			switch a := v.RawGetInt(i).(type) {
			case lua.LString:
				c.Args = append(c.Args, string(a))
			case lua.LNumber:
				c.Args = append(c.Args, a.String())
			default:
				argError(L, fn, 1, "argv[%d] must be a string, got %s", i, typeName(a))
			}
		}
		if c.Args[0] == "" {
			argError(L, fn, 1, "argv[1] is empty")
		}
	default:
		argError(L, fn, 1, "command must be an argv table or a shell string, got %s", typeName(v))
	}
	opts := optTable(L, fn, 2, "options")
	checkOptions(L, fn, opts, "timeout", "env", "dir", "stdin")
	if s, ok := lib.env.(CommandStarter); ok {
		c.Start = s.StartCommand
	}
	c.Timeout = optSeconds(L, fn, opts, "timeout", 0)
	if in, ok := optStringField(L, fn, opts, "stdin"); ok {
		c.Stdin = in
	}
	if opts != nil {
		env := stringMap(L, fn, "env", opts.RawGetString("env"))
		for k, v := range env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
				raise(L, fn, "env: invalid variable %q", k)
			}
			c.Env = append(c.Env, k+"="+v)
		}
	}
	// The attempt's tags come last, so that env cannot change them: they are how a resume
	// finds what an attempt left running.
	if tagged, ok := lib.env.(ExecEnver); ok {
		c.Env = append(c.Env, tagged.ExecEnv()...)
	}
	dir := "."
	if d, ok := optStringField(L, fn, opts, "dir"); ok && d != "" {
		dir = d
	}
	p, err := lib.confine().resolve(dir)
	if err != nil {
		raise(L, fn, "dir: %v", err)
	}
	// Stat through os.Root: the folder must exist and no link in it may lead out.
	err = p.with(func(r *os.Root, rel string) error {
		fi, err := r.Stat(rel)
		if err == nil && !fi.IsDir() {
			return fmt.Errorf("%q is not a folder", dir)
		}
		return err
	})
	if err != nil {
		raise(L, fn, "dir: %v", err)
	}
	c.Dir = p.abs()
	checkContext(L, fn)

	res, err := RunCommand(stepContext(L), c)
	if err != nil {
		raise(L, fn, "cannot start %q: %v", c.Args[0], err)
	}
	t := L.CreateTable(0, 6)
	t.RawSetString("code", lua.LNumber(res.Code))
	t.RawSetString("stdout", lua.LString(res.Stdout))
	t.RawSetString("stderr", lua.LString(res.Stderr))
	if res.TimedOut {
		t.RawSetString("timed_out", lua.LTrue)
	}
	if res.Interrupted {
		t.RawSetString("interrupted", lua.LTrue)
	}
	if res.Signal != "" {
		t.RawSetString("signal", lua.LString(res.Signal))
	}
	L.Push(t)
	return 1
}
