package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"apollo/eventlog"
)

// ioFault is one injected failure: the nth call of op fails with err;
// short makes a failing write write half its bytes first.
type ioFault struct {
	op    string // "write", "sync", "rename", "dirsync"
	n     int
	err   error
	short bool
}

func (f ioFault) String() string {
	s := fmt.Sprintf("%s #%d %v", f.op, f.n, f.err)
	if f.short {
		s += " (short write)"
	}
	return s
}

// sweepFS is the file-system seam of the sweep: it counts calls by kind,
// fails the one its fault names, and keeps a trace of what was done to each
// file after that, so a test can tell whether the engine trusted anything
// past the fault.
type sweepFS struct {
	eventlog.OS
	fault ioFault

	mu     sync.Mutex
	counts map[string]int
	failed string   // the path of the failed call, "" before it
	after  []string // calls on that path after the fault
}

func (s *sweepFS) hit(op, path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	if s.failed != "" && path == s.failed {
		s.after = append(s.after, op)
	}
	s.counts[op]++
	if op == s.fault.op && s.counts[op] == s.fault.n {
		s.failed = path
		return s.fault.err
	}
	return nil
}

type sweepFile struct {
	*os.File
	fs   *sweepFS
	path string
}

func (s *sweepFS) OpenFile(name string, flag int, perm os.FileMode) (eventlog.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &sweepFile{File: f, fs: s, path: name}, nil
}

func (f *sweepFile) Write(b []byte) (int, error) {
	if err := f.fs.hit("write", f.path); err != nil {
		if f.fs.fault.short {
			n, _ := f.File.Write(b[:len(b)/2])
			return n, err
		}
		return 0, err
	}
	return f.File.Write(b)
}

func (f *sweepFile) Sync() error {
	if err := f.fs.hit("sync", f.path); err != nil {
		return err
	}
	return f.File.Sync()
}

func (s *sweepFS) WriteFile(name string, data []byte, perm os.FileMode) error {
	if err := s.hit("write", name); err != nil {
		return err
	}
	if err := s.hit("sync", name); err != nil {
		return err
	}
	return s.OS.WriteFile(name, data, perm)
}

func (s *sweepFS) Rename(oldpath, newpath string) error {
	if err := s.hit("rename", newpath); err != nil {
		return err
	}
	return s.OS.Rename(oldpath, newpath)
}

func (s *sweepFS) SyncDir(dir string) error {
	if err := s.hit("dirsync", dir); err != nil {
		return err
	}
	return s.OS.SyncDir(dir)
}

// TestIOFaults fails the Nth write, fsync, rename and folder fsync of a run,
// for every N the run reaches, with EIO, ENOSPC and a short write: the run
// must stop with a clear error (never report success; a failed snapshot is
// only a warning, since the log is the authority), nothing may be
// written or synced to the failed file after the fault, the log must still
// read back, and a run after the fault clears must complete, every step's
// body having run at most twice. Under -short each kind of fault (an op
// and an error) fails one call only, a different one for each kind,
// spread over the run.
func TestIOFaults(t *testing.T) {
	const yaml = `
task_name: faults
parallelism: 2
steps:
  - id: a
    command: echo a >> a.count
    cleanup_command: echo a >> a.cleanup
  - id: b
    command: echo b >> b.count
    depends_on: [a]
    durability: batch
  - id: c
    lua: |
      require("apollo.fs").append("c.count", "c\n")
      return require("apollo.idem").once("c", function() return 1 end, {verify = function() return true, 1 end})
    depends_on: [a]
  - id: d
    command: echo d >> d.count
    depends_on: [b, c]
`
	// How many calls of each kind a clean run makes.
	clean := &sweepFS{}
	if err, st, _ := runPipeline(t, t.TempDir(), yaml, RunOptions{}, Options{FS: clean}); err != nil || !st.Complete() {
		t.Fatalf("clean run: %v", err)
	}
	modes := map[string][]ioFault{
		"write":   {{err: syscall.EIO}, {err: syscall.ENOSPC}, {err: syscall.ENOSPC, short: true}},
		"sync":    {{err: syscall.EIO}, {err: syscall.ENOSPC}},
		"rename":  {{err: syscall.EIO}, {err: syscall.ENOSPC}},
		"dirsync": {{err: syscall.EIO}},
	}
	// The faults are independent runs in folders of their own: they run
	// side by side, and the sweep is judged once all have ended.
	var faults, hit, snapshots atomic.Int32
	t.Run("sweep", func(t *testing.T) {
		for _, op := range []string{"write", "sync", "rename", "dirsync"} {
			for m, mode := range modes[op] {
				for _, n := range faultCalls(clean.counts[op], m, len(modes[op])) {
					f := mode
					f.op, f.n = op, n
					faults.Add(1)
					t.Run(f.String(), func(t *testing.T) {
						t.Parallel()
						reached, snapshot := checkIOFault(t, yaml, f)
						if reached {
							hit.Add(1)
						}
						if snapshot {
							snapshots.Add(1)
						}
					})
				}
			}
		}
	})
	t.Logf("io-faults calls=%v faults=%d reached=%d (on the snapshot, a warning: %d)", clean.counts, faults.Load(), hit.Load(), snapshots.Load())
	if hit.Load() < faults.Load()*3/4 {
		t.Errorf("only %d of %d faults were reached", hit.Load(), faults.Load())
	}
}

// faultCalls lists the calls (1 to count) of an op that the m-th of its
// modes kinds of fault fails, a run for each: every call, or under -short
// one, the middle of the m-th of modes equal parts of the run, so that the
// op's kinds fail different calls (the whole sweep takes 7 to 14 s).
func faultCalls(count, m, modes int) []int {
	if !testing.Short() {
		calls := make([]int, count)
		for i := range calls {
			calls[i] = i + 1
		}
		return calls
	}
	return []int{1 + count*(2*m+1)/(2*modes)}
}

// checkIOFault runs yaml with fault f injected, then again on a sound disk,
// and reports whether the run reached the faulty call and whether that call
// was the snapshot's, whose failure is only a warning.
func checkIOFault(t *testing.T, yaml string, f ioFault) (reached, snapshot bool) {
	dir := t.TempDir()
	ffs := &sweepFS{fault: f}
	err, _, _ := runPipeline(t, dir, yaml, RunOptions{}, Options{FS: ffs})
	if ffs.failed == "" {
		// The run took another path (parallel steps): this call was not
		// reached.
		return false, false
	}
	// The snapshot's file, and the folders it is created in.
	snapshot = strings.Contains(ffs.failed, ".snapshot.json") ||
		(f.op == "dirsync" && err == nil && (filepath.Base(ffs.failed) == "state" || filepath.Base(ffs.failed) == ".apollo"))
	if !snapshot && err == nil {
		t.Errorf("%v on %s: the run reported success", f, ffs.failed)
		return true, false
	}
	if err != nil && !errors.Is(err, f.err) {
		t.Errorf("%v: Run = %v, want the injected error", f, err)
	}
	var we *eventlog.WriteError
	if errors.As(err, &we) && !strings.Contains(err.Error(), "the run stopped") {
		t.Errorf("%v: message %q does not say the run stopped", f, err)
	}
	if strings.HasSuffix(ffs.failed, ".jsonl") {
		for _, op := range ffs.after {
			if op == "write" || op == "sync" {
				t.Errorf("%v: a %s on the log after the fault (calls after it: %v)", f, op, ffs.after)
				break
			}
		}
	}
	if logs, _ := filepath.Glob(filepath.Join(dir, ".apollo", "logs", "*.jsonl")); len(logs) > 0 {
		if _, _, err := eventlog.ReadAll(logs[0], eventlog.ReadOptions{TaskID: "t"}); err != nil {
			t.Errorf("%v: the log does not read back: %v", f, err)
		}
	}
	// The disk is fine again: the run resumes and completes.
	err, st, out := runPipeline(t, dir, yaml, RunOptions{}, Options{})
	if err != nil || st == nil || !st.Complete() {
		t.Errorf("%v, then resume: Run = %v\n%s", f, err, out)
		return true, snapshot
	}
	for _, s := range []string{"a", "b", "c", "d"} {
		b, _ := os.ReadFile(filepath.Join(dir, s+".count"))
		if c := strings.Count(string(b), s); c < 1 || c > 2 {
			t.Errorf("%v: step %s ran %d times", f, s, c)
		}
	}
	return true, snapshot
}
