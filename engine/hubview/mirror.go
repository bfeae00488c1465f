package hubview

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"apollo/engine/remote"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// Mirror is the copy of the hub's logs in a folder. Run keeps it.
type Mirror struct {
	c   *remote.Client
	dir statedir.Dir
	// Logf receives what the mirror says of logs it cannot copy.
	logf func(format string, args ...any)
	// Every is how often the leases and the task index are read (default 2 s).
	Every time.Duration

	ready chan struct{}
	once  sync.Once
	// kick asks for the leases at once: a new log has begun.
	kick chan struct{}

	mu      sync.Mutex
	copies  map[string]*copyOf       // by the task's token
	holders map[string]remote.Holder // by the task's token
	noted   map[string]bool          // tokens whose trouble was said
}

// copyOf is the copy of one task's log.
type copyOf struct {
	path string
	seq  int64 // the last record's seq written
	// broken: the hub's log does not start at seq 1 or has a gap; nothing
	// more is written until a new log (seq 1) starts.
	broken bool
}

// New returns the mirror of the hub c's logs into dir's logs folder.
func New(c *remote.Client, dir string, logf func(format string, args ...any)) *Mirror {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return &Mirror{c: c, dir: statedir.Dir{Root: dir}, logf: logf, ready: make(chan struct{}), kick: make(chan struct{}, 1),
		copies: map[string]*copyOf{}, holders: map[string]remote.Holder{}, noted: map[string]bool{}}
}

// Ready is closed once the copy holds every record the hub held when Run
// started.
func (m *Mirror) Ready() <-chan struct{} { return m.ready }

func (m *Mirror) setReady() { m.once.Do(func() { close(m.ready) }) }

// Run keeps the copy until ctx is done. A hub unreachable past the
// client's give-up limit is said, and tried again.
func (m *Mirror) Run(ctx context.Context) error {
	if err := eventlog.MkdirAll(eventlog.OS{}, m.dir.Logs()); err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		every := m.Every
		if every <= 0 {
			every = 2 * time.Second
		}
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			m.refresh(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-m.kick:
			}
		}
	}()
	defer wg.Wait()
	next := uint64(1)
	for ctx.Err() == nil {
		last, err := m.c.LogStreamLast(ctx)
		if err == nil {
			if last < next {
				m.setReady()
			}
			err = m.c.FollowLogs(ctx, next, func(lm remote.LogMsg) {
				m.take(lm)
				next = lm.Stream + 1
				if lm.Stream >= last || lm.Pending == 0 {
					m.setReady()
				}
			})
		}
		if err != nil && ctx.Err() == nil {
			m.logf("apollo serve: follow the hub's logs: %v; trying again", err)
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
		}
	}
	return nil
}

// Holder says whether a coordinator holds the task's lease, and its pid.
func (m *Mirror) Holder(taskID string) (pid int, held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.holders[remote.Token(taskID)]
	return h.PID, ok
}

// refresh reads who holds the tasks, and drops the copies of the tasks
// that the hub no longer indexes nor holds a log of.
func (m *Mirror) refresh(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 2*m.c.Config().CallTimeout)
	defer cancel()
	if hs, err := m.c.TaskHolders(cctx); err == nil {
		m.mu.Lock()
		m.holders = hs
		m.mu.Unlock()
	}
	tasks, err := m.c.ListTasks(cctx)
	if err != nil {
		return
	}
	indexed := map[string]bool{}
	for _, t := range tasks {
		indexed[remote.Token(t.TaskID)] = true
	}
	m.mu.Lock()
	var check []string
	for tok := range m.copies {
		if !indexed[tok] {
			check = append(check, tok)
		}
	}
	m.mu.Unlock()
	for _, tok := range check {
		has, err := m.c.HasLog(cctx, tok)
		if err != nil || has {
			continue
		}
		m.mu.Lock()
		if cp := m.copies[tok]; cp != nil {
			os.Remove(cp.path)
			delete(m.copies, tok)
		}
		m.mu.Unlock()
	}
}

// take writes one record to its task's copy.
func (m *Mirror) take(lm remote.LogMsg) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cp := m.copies[lm.Token]
	switch {
	case lm.Seq == 1:
		path, err := m.pathOf(lm)
		if err != nil {
			m.note(lm.Token, "apollo serve: the hub's log %s%s: %v; it is not shown", "apollo.log.", lm.Token, err)
			return
		}
		if cp != nil && cp.path != path {
			os.Remove(cp.path) // a new log of the task replaced it in the hub
		}
		cp = &copyOf{path: path}
		m.copies[lm.Token] = cp
		if err := writeLine(path, lm.Line, true); err != nil {
			cp.broken = true
			m.note(lm.Token, "apollo serve: copy the hub's log of %s: %v", path, err)
			return
		}
		cp.seq = 1
		delete(m.noted, lm.Token)
		select {
		case m.kick <- struct{}{}:
		default:
		}
	case cp == nil || cp.broken:
		if cp == nil {
			m.copies[lm.Token] = &copyOf{broken: true}
		}
		m.note(lm.Token, "apollo serve: the hub's log apollo.log.%s does not start at seq 1 (its first record here is seq %d): it is not shown", lm.Token, lm.Seq)
	case lm.Seq <= cp.seq:
		// Already written.
	case lm.Seq != cp.seq+1:
		cp.broken = true
		m.note(lm.Token, "apollo serve: the hub's log apollo.log.%s jumps from seq %d to %d: it is shown up to seq %d", lm.Token, cp.seq, lm.Seq, cp.seq)
	default:
		if err := writeLine(cp.path, lm.Line, false); err != nil {
			cp.broken = true
			m.note(lm.Token, "apollo serve: copy the hub's log of %s: %v", cp.path, err)
			return
		}
		cp.seq = lm.Seq
	}
}

// note says a task's trouble once.
func (m *Mirror) note(tok, format string, args ...any) {
	if m.noted[tok] {
		return
	}
	m.noted[tok] = true
	m.logf(format, args...)
}

// pathOf is where the copy of the log that lm starts goes: the name the
// log had where it was written, when it is a log's name for the record's
// task, else one made from the record. Nothing from the hub names a file
// outside the copy's logs folder.
func (m *Mirror) pathOf(lm remote.LogMsg) (string, error) {
	rec, err := eventlog.Decode(bytes.TrimSuffix(lm.Line, []byte("\n")))
	if err != nil {
		return "", fmt.Errorf("its first record does not read: %w", err)
	}
	if rec.TaskID == "" || remote.Token(rec.TaskID) != lm.Token {
		return "", fmt.Errorf("its first record is of task %q", rec.TaskID)
	}
	if id, _, archived, ok := statedir.ParseLogName(lm.Name); ok && !archived && id == rec.TaskID && filepath.Base(lm.Name) == lm.Name {
		return filepath.Join(m.dir.Logs(), lm.Name), nil
	}
	path := m.dir.Log(rec.TaskID, max(1, rec.Time().Unix()))
	if filepath.Dir(path) != m.dir.Logs() {
		return "", errors.New("its task id cannot name a file")
	}
	return path, nil
}

// writeLine appends line to the file at path (a new file with fresh).
// The copy is derived: it is not fsynced.
func writeLine(path string, line []byte, fresh bool) error {
	flag := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if fresh {
		flag |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(line)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
