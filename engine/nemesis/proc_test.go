package nemesis

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"

	"apollo/engine/internal/testbin"
)

// The parts of the world the nemesis plays with: the real binary's
// processes, and a fault-injecting proxy in front of every connection.

// apollo is the real binary, built once per test process.
var apollo testbin.Binary

func TestMain(m *testing.M) {
	code := m.Run()
	apollo.Remove()
	os.Exit(code)
}

// proc is one process of the binary that the nemesis may kill, pause and
// start again with the same arguments.
type proc struct {
	name string
	bin  string
	args []string
	env  []string
	dir  string
	out  string // its stdout and stderr, appended across starts

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{} // closed when the current start has exited
	code   int           // the last exit code; -1 when killed by a signal
	paused bool
}

// start starts the process; it must not be running.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "==== %s: %s %s\n", time.Now().Format("15:04:05.000"), p.name, strings.Join(p.args, " "))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Dir, cmd.Env = p.dir, p.env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.paused = cmd, done, false
	go func() {
		err := cmd.Wait()
		f.Close()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			code = -2
		}
		p.mu.Lock()
		p.code = code
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// running reports whether the process is started and has not exited.
func (p *proc) running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// wait waits for the current start to exit and returns its exit code.
func (p *proc) wait() int {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return -3
	}
	<-done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code
}

// signal sends sig to the running process (not to its group); false when
// it is not running.
func (p *proc) signal(sig syscall.Signal) bool {
	if !p.running() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if sig == syscall.SIGSTOP {
		p.paused = true
	}
	if sig == syscall.SIGCONT {
		p.paused = false
	}
	return p.cmd.Process.Signal(sig) == nil
}

// waitUntil waits for the current start to exit until deadline: its exit
// code and true, or false when it still runs then.
func (p *proc) waitUntil(deadline time.Time) (int, bool) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return -3, true
	}
	select {
	case <-done:
		return p.wait(), true
	case <-time.After(time.Until(deadline)):
		return 0, false
	}
}

// kill sends SIGKILL and waits for the exit.
func (p *proc) kill() {
	if p.signal(syscall.SIGKILL) {
		p.wait()
	}
}

// pid is the running process's id, 0 when none.
func (p *proc) pid() int {
	if !p.running() {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// childGroups lists the process groups of pid's children: a worker's
// steps each run in their own.
func childGroups(pid int) []int {
	var groups []int
	dirs, _ := os.ReadDir("/proc")
	for _, e := range dirs {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 3 {
			continue
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			if pg, err := strconv.Atoi(f[2]); err == nil && pg != pid {
				groups = append(groups, pg)
			}
		}
	}
	return groups
}

// killTagged kills every process whose environment holds tag: the steps
// orphaned by killed workers.
func killTagged(tag string) {
	want := []byte(tag + "\x00")
	dirs, _ := os.ReadDir("/proc")
	for _, e := range dirs {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && bytes.Contains(env, want) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// link is a proxy in front of one party's connections to another: from a
// client to a hub node, or from a hub node to another's cluster port.
type link struct {
	name string // from→to
	from string
	to   string
	p    *toxiproxy.Proxy

	mu      sync.Mutex
	faulted bool
}

// proxies creates the links of a world; they share one toxiproxy server.
type proxies struct {
	api   *toxiproxy.ApiServer
	links []*link
}

func newProxies() *proxies {
	return &proxies{api: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// add starts a link from → to, listening on a free loopback port.
func (ps *proxies) add(from, to, upstream string) (*link, error) {
	l := &link{name: from + "→" + to, from: from, to: to,
		p: toxiproxy.NewProxy(ps.api, from+"-"+to, "127.0.0.1:0", upstream)}
	if err := l.p.Start(); err != nil {
		return nil, fmt.Errorf("proxy %s: %w", l.name, err)
	}
	ps.links = append(ps.links, l)
	return l, nil
}

// addr is where the link listens.
func (l *link) addr() string { return l.p.Listen }

// toxic adds a toxic of kind typ, both ways, with attrs; false when the
// link is faulted already.
func (l *link) toxic(typ string, attrs map[string]any) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.faulted {
		return false
	}
	for _, stream := range []string{"upstream", "downstream"} {
		b, _ := json.Marshal(map[string]any{"name": typ + "_" + stream, "type": typ, "stream": stream, "attributes": attrs})
		if _, err := l.p.Toxics.AddToxicJson(bytes.NewReader(b)); err != nil {
			l.p.Toxics.ResetToxics(context.Background())
			return false
		}
	}
	l.faulted = true
	return true
}

// heal removes the link's toxics. With reset, its connections are closed
// first: a cut (timeout) toxic drops bytes, and a connection must not
// carry anything after bytes were lost in it, as TCP never does.
func (l *link) heal(reset bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if reset {
		l.p.Stop()
	}
	l.p.Toxics.ResetToxics(context.Background())
	if reset {
		for try := 0; try < 50; try++ {
			if err := l.p.Start(); err == nil || errors.Is(err, toxiproxy.ErrProxyAlreadyStarted) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	l.faulted = false
}

// close stops every link.
func (ps *proxies) close() {
	for _, l := range ps.links {
		l.p.Stop()
	}
}
