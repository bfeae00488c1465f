package executor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"apollo/engine/pipeline"
	"apollo/engine/textfmt"
	"apollo/stdlib"
)

// holdPrefix keeps a shell body from running until the engine says so: the
// shell waits for one line on fd 3, which the engine writes only after the
// attempt's STEP_START (naming this process group) is on disk. If the engine
// dies first, the read sees end of file and the shell exits without running
// the body. It stays on the body's first line so error line numbers match.
const holdPrefix = "read _ <&3 || exit 125; exec 3<&-; "

// errexit makes /bin/sh stop at the first command that fails (set -e), and
// a pipeline fail when any of its commands does (pipefail) where the shell
// has it: dash before 0.5.13 refuses set -o pipefail, which `command` keeps
// from ending the shell. It follows holdPrefix on the body's first line,
// so error line numbers still match, and adds no process.
const errexit = "command set -o pipefail 2>/dev/null; set -e; "

// holdExec holds a program that is no POSIX shell (python3 -c) the same
// way: /bin/sh waits for the go-ahead, then execs the program, with the
// body as its last argument, in its own place (same process, same group).
const holdExec = `read _ <&3 || exit 125; exec "$@" 3<&-`

// bashArgs are what shell: bash runs a body with.
var bashArgs = []string{"-e", "-o", "pipefail", "-c"}

// heldCommand returns the program and arguments that run body as shell (a
// pipeline.Step.Shell) names, held before the body until released:
//
//   - the default (nil): /bin/sh -c, with errexit;
//   - bash: bash -e -o pipefail -c;
//   - a command line: exactly its words and the body; a POSIX shell's
//     body (sh, bash, dash, ash, ksh, mksh ending in a -c flag) is held
//     by holdPrefix, any other program by a /bin/sh that execs it.
func heldCommand(shell []string, body string) (string, []string) {
	switch {
	case len(shell) == 0:
		return "/bin/sh", []string{"-c", holdPrefix + errexit + body}
	case len(shell) == 1 && shell[0] == pipeline.ShellBash:
		return shell[0], append(slices.Clone(bashArgs), holdPrefix+body)
	case posixShell(shell):
		return shell[0], append(slices.Clone(shell[1:]), holdPrefix+body)
	}
	args := append([]string{"-c", holdExec, "apollo"}, shell...)
	return "/bin/sh", append(args, body)
}

// posixShell reports whether a command line runs a POSIX shell that reads
// its body as the argument of a last -c flag (-c, -ec, -euc).
func posixShell(shell []string) bool {
	switch filepath.Base(shell[0]) {
	case "sh", "bash", "dash", "ash", "ksh", "mksh":
	default:
		return false
	}
	last := shell[len(shell)-1]
	return len(shell) > 1 && strings.HasPrefix(last, "-") && !strings.HasPrefix(last, "--") && strings.HasSuffix(last, "c")
}

// shell is the interpreter of a's step: nil (sh) when a has no step.
func (a *Attempt) shell() []string {
	if a.Step == nil {
		return nil
	}
	return a.Step.Shell
}

// FindShell returns why the interpreter of a's step (shell:) cannot run
// here, or nil: a worker checks it before it starts an attempt.
func FindShell(a *Attempt) error { return pipeline.FindShell(a.shell(), a.Dir) }

// Shell runs shell bodies as their step's shell: names (heldCommand), each
// attempt in its own process group.
type Shell struct{}

// heldShell is a shell body's process: started in its own process group and
// held before the body's first line until released.
type heldShell struct {
	cmd   *exec.Cmd
	hold  *os.File // the hold pipe's write end; nil once released
	pipes *bodyPipes
	pidfd int // -1 when the system gives none (macOS, Linux before 5.3)
	out   *lazyOutput
	hash  hash.Hash // of stdout
}

// startHeld starts the shell of attempt a, held.
func startHeld(a *Attempt) (*heldShell, error) {
	// The hold pipe is made as the output pipes are (openBodyPipes):
	// blocking ends that the runtime's poller never sees, where os.Pipe
	// would cost four fcntl and four epoll_ctl calls per step.
	var hold [2]int
	if err := pipe(&hold); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	holdR, holdW := os.NewFile(uintptr(hold[0]), "|0"), os.NewFile(uintptr(hold[1]), "|1")
	prog, args := heldCommand(a.shell(), a.Command)
	h, err := startBody(a, exec.Command(prog, args...), holdR)
	holdR.Close()
	if err != nil {
		holdW.Close()
		return nil, fmt.Errorf("start %s: %w", pipeline.ShellText(a.shell()), err)
	}
	h.hold = holdW
	return h, nil
}

// startBody starts cmd (its program and words set) as attempt a's body: in
// a's folder and environment, in a process group of its own, with extra
// open in it from fd 3 on. stdout and stderr go through pipes, so that a
// body that prints nothing creates no output file, and stdout is hashed on
// the way.
func startBody(a *Attempt, cmd *exec.Cmd, extra ...*os.File) (*heldShell, error) {
	h := &heldShell{cmd: cmd, out: newOutput(a), hash: sha256.New(), pidfd: -1}
	var err error
	h.pipes, err = openBodyPipes(io.MultiWriter(h.hash, h.out), h.out)
	if err != nil {
		return nil, err
	}
	cmd.Dir, cmd.Env = a.Dir, a.Env
	cmd.Stdout, cmd.Stderr = h.pipes.w[0], h.pipes.w[1]
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = startAttr(&h.pidfd)
	err = cmd.Start()
	h.pipes.closeWriters()
	if err != nil {
		h.pipes.close()
		return nil, err
	}
	return h, nil
}

// release lets the body run.
func (h *heldShell) release() error {
	_, err := h.hold.Write([]byte("\n"))
	h.hold.Close()
	h.hold = nil
	return err
}

// untilExit copies the body's output until the shell exits.
func (h *heldShell) untilExit() { h.pipes.untilExit(h.cmd.Process.Pid, h.pidfd) }

// drain copies what is left of the output. A process that left the group
// may still hold stdout or stderr; it is not waited for long.
func (h *heldShell) drain() { h.pipes.drain(time.Now().Add(2 * time.Second)) }

// close frees what the shell holds. A shell never released has run
// nothing of its body: it is ended (it would read end of file instead of
// its go-ahead and exit 125 by itself) and waited for first.
func (h *heldShell) close() {
	if h.hold != nil {
		h.hold.Close()
		h.hold = nil
		killGroup(h.cmd.Process.Pid, syscall.SIGKILL)
		h.untilExit()
		h.cmd.Wait()
		h.drain()
	}
	h.pipes.close()
	if h.pidfd >= 0 {
		syscall.Close(h.pidfd)
		h.pidfd = -1
	}
	h.out.Close()
}

// Run runs a.Command: at once when it is one plain command and a allows
// it (a.Direct), else in a held shell.
func (Shell) Run(ctx context.Context, a *Attempt) Result {
	if a.Direct {
		if prog, words, ok := directCommand(a); ok {
			return runDirect(ctx, a, prog, words)
		}
	}
	h, err := startHeld(a)
	if err != nil {
		return Result{Err: err, ExitCode: -1, NotStarted: true}
	}
	return runHeld(ctx, a, h)
}

// StartAhead starts a's shell now, held before its body until Run.
func (Shell) StartAhead(a *Attempt) (Ahead, error) {
	h, err := startHeld(a)
	if err != nil {
		return nil, err
	}
	return &aheadShell{a: a, h: h}, nil
}

// aheadShell is a shell started ahead of its attempt.
type aheadShell struct {
	a   *Attempt
	h   *heldShell
	ran bool
}

func (s *aheadShell) Attempt() *Attempt { return s.a }

// Usable reports whether the shell still waits in the workspace folder: a
// dependency may have replaced the folder itself while the shell waited in
// the old one.
func (s *aheadShell) Usable() bool { return inFolder(s.h.cmd.Process.Pid, s.a.Dir) }

func (s *aheadShell) Run(ctx context.Context) Result {
	s.ran = true
	return runHeld(ctx, s.a, s.h)
}

func (s *aheadShell) Close() {
	if !s.ran {
		s.h.close()
	}
}

// runHeld runs attempt a in its held shell h, and frees h.
func runHeld(ctx context.Context, a *Attempt, h *heldShell) Result {
	defer h.close()
	if err := a.Started(h.cmd.Process.Pid); err != nil {
		return Result{Err: err, ExitCode: -1, NotStarted: true} // close ends the held shell
	}
	return runReleased(ctx, a, h)
}

// runDirect runs attempt a's body, the plain command prog with words
// (directCommand), once Started has returned, and frees what it used.
func runDirect(ctx context.Context, a *Attempt, prog string, words []string) Result {
	if err := a.Started(0); err != nil {
		return Result{Err: err, ExitCode: -1, NotStarted: true}
	}
	h, err := startDirect(a, prog, words)
	if err != nil {
		// Not a program the kernel runs (a script without #!): /bin/sh
		// runs it, as it would have from the start.
		if h, err = startHeld(a); err != nil {
			return Result{Err: err, ExitCode: -1, NotStarted: true}
		}
	}
	defer h.close()
	return runReleased(ctx, a, h)
}

// runReleased releases h (when it is held), waits for the body and says
// how it ended.
func runReleased(ctx context.Context, a *Attempt, h *heldShell) Result {
	pgid := h.cmd.Process.Pid
	released := true
	if h.hold != nil {
		if err := h.release(); err != nil {
			killGroup(pgid, syscall.SIGKILL)
			released = false
		}
	}
	if released && a.Running != nil {
		a.Running(pgid)
	}

	waitErr := waitGroup(ctx, h.cmd, a.KillGrace, h.untilExit)
	h.drain()

	res := Result{OutputDigest: "sha256:" + hex.EncodeToString(h.hash.Sum(nil)), Note: h.out.cutNote()}
	res.TimedOut, res.Interrupted = endCause(ctx)
	res.ExitCode = exitCode(waitErr)
	switch {
	case res.TimedOut:
		res.Err = fmt.Errorf("timed out after %s; process group %d was ended", a.Step.Timeout, pgid)
	case res.Interrupted:
		res.Err = fmt.Errorf("interrupted: apollo was asked to stop; process group %d was ended", pgid)
	case waitErr != nil:
		res.Err = fmt.Errorf("exit status %s%s", describeExit(waitErr), lastLines(a.OutputPath, 5))
	}
	if a.PublishPath != "" {
		written := true // unless a read found no file: the group has ended, so none comes later
		if res.Err == nil {
			pub, found, err := readPublished(a.PublishPath)
			if err != nil {
				res.Err = err
			}
			res.Output, written = pub, found
		}
		// Its values live on in the STEP_END's output, masked; the file
		// may hold a secret in clear.
		if !written {
			return res
		}
		if err := os.Remove(a.PublishPath); err != nil && !errors.Is(err, os.ErrNotExist) && res.Err == nil {
			res.Err = fmt.Errorf("remove $APOLLO_OUTPUT after reading it: %w", err)
		}
	}
	return res
}

// waitGroup waits for cmd, the leader of its own process group. A timeout
// or an interrupt (ctx ending) ends the group from the side, so the common
// path costs no extra goroutine hand-off. Members of the group left behind
// (`sleep 100 &`) are ended after the leader: an old attempt must never run
// beside the next one. untilExit, when not nil, returns once the leader
// has exited (copying its output meanwhile), before it is reaped.
func waitGroup(ctx context.Context, cmd *exec.Cmd, grace time.Duration, untilExit func()) error {
	pgid := cmd.Process.Pid
	exited := make(chan struct{})
	stop := context.AfterFunc(ctx, func() { endGroup(pgid, exited, grace) })
	if untilExit != nil {
		untilExit()
	}
	err := cmd.Wait()
	close(exited)
	stop()
	stdlib.EndGroup(pgid, grace)
	return err
}

// endGroup ends a running process group: SIGTERM, then SIGKILL after grace
// unless exited is closed first (the leader was waited for).
func endGroup(pgid int, exited <-chan struct{}, grace time.Duration) {
	killGroup(pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
	case <-t.C:
		killGroup(pgid, syscall.SIGKILL)
	}
}

func killGroup(pgid int, sig syscall.Signal) {
	if pgid > 0 {
		_ = syscall.Kill(-pgid, sig)
	}
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func describeExit(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return fmt.Sprintf("killed by signal %s", ws.Signal())
		}
		return fmt.Sprintf("%d", ee.ExitCode())
	}
	return err.Error()
}

// lastLines returns the last n lines of a file, formatted to follow an
// error message, so the log says why without opening the output file.
func lastLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() == 0 {
		return ""
	}
	const window = 2048
	off := fi.Size() - window
	if off < 0 {
		off = 0
	}
	buf := make([]byte, fi.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(buf), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first may be cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return ": " + strings.Join(lines, " | ")
}

// readPublished reads the key=value lines a shell body wrote to
// $APOLLO_OUTPUT into a JSON object; nil when it wrote nothing.
func readPublished(path string) (_ json.RawMessage, found bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, true, fmt.Errorf("read $APOLLO_OUTPUT: %w", err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, true, nil
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" {
			return nil, true, fmt.Errorf("$APOLLO_OUTPUT line %d: %q is not key=value", n, line)
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, true, fmt.Errorf("read $APOLLO_OUTPUT: %w", err)
	}
	pub, err := json.Marshal(out)
	return pub, true, err
}

// DefaultMaxOutput is the most an attempt's output file keeps when
// Options.MaxOutputBytes is 0.
const DefaultMaxOutput = 100 << 20

// lazyOutput is an attempt's output file, created on its first write: most
// steps of a big DAG print nothing, and creating a file can cost as much as
// an fsync. It keeps at most limit bytes (when limit > 0): a step that
// prints without end must not fill the disk the event log lives on. What
// is over the limit is counted and dropped, not refused, so the step's
// pipes keep draining and the step itself is not disturbed; Close notes
// the cut at the end of the file.
type lazyOutput struct {
	path    string
	limit   int64
	masked  *textfmt.MaskWriter // masks the attempt's secrets before they reach the file
	mu      sync.Mutex
	f       *os.File
	err     error // why the file could not be created or written (a full disk)
	kept    int64
	dropped int64
	lost    int64 // bytes lost to err
}

// newOutput is the output file of attempt a: its path and limit, its
// secrets masked.
func newOutput(a *Attempt) *lazyOutput {
	o := &lazyOutput{path: a.OutputPath, limit: a.OutputLimit}
	if a.Mask != nil {
		o.masked = a.Mask.Writer(fileWriter{o})
	}
	return o
}

// fileWriter writes to the file of a lazyOutput, unmasked.
type fileWriter struct{ o *lazyOutput }

func (w fileWriter) Write(p []byte) (int, error) { return w.o.write(p) }

func (o *lazyOutput) Write(p []byte) (int, error) {
	if o.masked != nil {
		return o.masked.Write(p)
	}
	return o.write(p)
}

func (o *lazyOutput) write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(p)
	if o.limit > 0 && o.kept+int64(n) > o.limit {
		room := max(o.limit-o.kept, 0)
		o.dropped += int64(n) - room
		p = p[:room]
		if len(p) == 0 {
			return n, nil
		}
	}
	if o.f == nil && o.err == nil {
		o.f, o.err = os.OpenFile(o.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	if o.err == nil {
		w, err := o.f.Write(p)
		o.kept += int64(w)
		p = p[w:]
		o.err = err
	}
	// What cannot be written is counted, not refused, so that the body's
	// pipes keep draining; the attempt's STEP_END says what was lost.
	o.lost += int64(len(p))
	return n, nil
}

// cutNote says what an attempt's output lost to the limit, "" if nothing.
func (o *lazyOutput) cutNote() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var notes []string
	if o.dropped > 0 {
		notes = append(notes, fmt.Sprintf("output cut at %d bytes: %d more bytes were dropped", o.limit, o.dropped))
	}
	if o.lost > 0 {
		notes = append(notes, fmt.Sprintf("output file %s: %d bytes could not be written: %v", o.path, o.lost, o.err))
	}
	return strings.Join(notes, "; ")
}

// Close notes a cut at the end of the file and closes it, if it was created.
func (o *lazyOutput) Close() error {
	if o.masked != nil {
		o.masked.Close() // what waited to be told from a secret
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		return nil
	}
	if o.dropped > 0 {
		fmt.Fprintf(o.f, "\n[apollo: output cut at %d bytes; %d more bytes were dropped]\n", o.limit, o.dropped)
	}
	return o.f.Close()
}
