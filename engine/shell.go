package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"apollo/stdlib"
)

// holdPrefix keeps a shell body from running until the engine says so: the
// shell waits for one line on fd 3, which the engine writes only after the
// attempt's STEP_START (naming this process group) is on disk. If the engine
// dies first, the read sees end of file and the shell exits without running
// the body. It stays on the body's first line so error line numbers match.
const holdPrefix = "read _ <&3 || exit 125; exec 3<&-; "

// Shell runs bodies with /bin/sh -c, each attempt in its own process group.
type Shell struct{}

// Run runs a.Command.
func (Shell) Run(ctx context.Context, a *Attempt) Result {
	out := &lazyOutput{path: a.OutputPath, limit: a.OutputLimit}
	defer out.Close()

	holdR, holdW, err := os.Pipe()
	if err != nil {
		return Result{Err: fmt.Errorf("start: %w", err), ExitCode: -1, NotStarted: true}
	}
	// stdout and stderr go through pipes, so that a step that prints
	// nothing creates no output file, and stdout is hashed on the way.
	hash := sha256.New()
	pipes, err := openBodyPipes(io.MultiWriter(hash, out), out)
	if err != nil {
		holdR.Close()
		holdW.Close()
		return Result{Err: fmt.Errorf("start: %w", err), ExitCode: -1, NotStarted: true}
	}
	defer pipes.close()
	pidfd := -1
	cmd := exec.Command("/bin/sh", "-c", holdPrefix+a.Command)
	cmd.Dir = a.Dir
	cmd.Env = a.Env
	cmd.Stdin = nil
	cmd.Stdout = pipes.w[0]
	cmd.Stderr = pipes.w[1]
	cmd.ExtraFiles = []*os.File{holdR}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, PidFD: &pidfd}
	startErr := cmd.Start()
	holdR.Close()
	pipes.closeWriters()
	if startErr != nil {
		holdW.Close()
		return Result{Err: fmt.Errorf("start /bin/sh: %w", startErr), ExitCode: -1, NotStarted: true}
	}
	if pidfd >= 0 {
		defer syscall.Close(pidfd)
	}
	pgid := cmd.Process.Pid
	copyOutput := func() { pipes.untilExit(pgid, pidfd) }
	// A process that left the group may still hold stdout or stderr; do not
	// wait long for it.
	drain := func() { pipes.drain(time.Now().Add(2 * time.Second)) }

	if err := a.Started(pgid); err != nil {
		holdW.Close() // the shell reads EOF and exits 125 without running the body
		copyOutput()
		cmd.Wait()
		drain()
		return Result{Err: err, ExitCode: -1, NotStarted: true}
	}
	_, werr := holdW.Write([]byte("\n"))
	holdW.Close()
	if werr != nil {
		killGroup(pgid, syscall.SIGKILL)
	} else if a.Running != nil {
		a.Running(pgid)
	}

	waitErr := waitGroup(ctx, cmd, a.KillGrace, copyOutput)
	drain()

	res := Result{OutputDigest: "sha256:" + hex.EncodeToString(hash.Sum(nil)), Note: out.cutNote()}
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
	if res.Err == nil && a.PublishPath != "" {
		pub, err := readPublished(a.PublishPath)
		if err != nil {
			res.Err = err
		}
		res.Output = pub
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
func readPublished(path string) (json.RawMessage, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(bytes.TrimSpace(b)) == 0) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read $APOLLO_OUTPUT: %w", err)
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
			return nil, fmt.Errorf("$APOLLO_OUTPUT line %d: %q is not key=value", n, line)
		}
		out[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read $APOLLO_OUTPUT: %w", err)
	}
	return json.Marshal(out)
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
	mu      sync.Mutex
	f       *os.File
	err     error
	kept    int64
	dropped int64
}

func (o *lazyOutput) Write(p []byte) (int, error) {
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
	if o.err != nil {
		return 0, fmt.Errorf("open output file: %w", o.err)
	}
	w, err := o.f.Write(p)
	o.kept += int64(w)
	if err != nil {
		return w, err
	}
	return n, nil
}

// cutNote says what an attempt's output lost to the limit, "" if nothing.
func (o *lazyOutput) cutNote() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dropped == 0 {
		return ""
	}
	return fmt.Sprintf("output cut at %d bytes: %d more bytes were dropped", o.limit, o.dropped)
}

// Close notes a cut at the end of the file and closes it, if it was created.
func (o *lazyOutput) Close() error {
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
