package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"apollo/engine"
	"apollo/engine/executor"
	"apollo/eventlog"
)

// crashFS simulates power loss, in the spirit of SQLite's crash VFS: it
// passes every operation to the real files but remembers what is durable —
// a file's bytes as of its last fsync, and which names its folder's last
// fsync covered. At its crash point the "disk" dies (every later call
// fails), and Crash rewrites the real files to what a power loss could have
// left: the durable bytes plus some of the unsynced ones, whole, cut, zeroed
// or garbage, or, for an event log, persisted out of order (a lost block,
// then later ones); a file whose creation no folder fsync covered may vanish.
type crashFS struct {
	crashAt int // the 1-based call at which the disk dies; 0: never

	mu      sync.Mutex
	calls   int
	dead    bool
	durable map[string][]byte // path → bytes known to be on disk
	named   map[string]bool   // path → its folder entry is durable

	reordered int // files Crash left with a lost block before kept later ones
}

func newCrashFS(crashAt int) *crashFS {
	return &crashFS{crashAt: crashAt, durable: map[string][]byte{}, named: map[string]bool{}}
}

var errPowerLoss = errors.New("simulated power loss")

// call counts one operation and reports whether the disk is dead.
func (c *crashFS) call() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dead {
		return errPowerLoss
	}
	c.calls++
	if c.calls == c.crashAt {
		c.dead = true
		return errPowerLoss
	}
	return nil
}

type crashFile struct {
	*os.File
	c    *crashFS
	path string
}

func (c *crashFS) OpenFile(name string, flag int, perm os.FileMode) (eventlog.File, error) {
	if err := c.call(); err != nil {
		return nil, err
	}
	_, statErr := os.Stat(name)
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if statErr != nil {
		c.named[name] = false // created: durable only once its folder is synced
	} else if _, ok := c.named[name]; !ok {
		c.named[name] = true
		if b, err := os.ReadFile(name); err == nil {
			c.durable[name] = b
		}
	}
	c.mu.Unlock()
	return &crashFile{File: f, c: c, path: name}, nil
}

func (f *crashFile) Write(b []byte) (int, error) {
	if err := f.c.call(); err != nil {
		return 0, err
	}
	return f.File.Write(b)
}

func (f *crashFile) Truncate(size int64) error {
	if err := f.c.call(); err != nil {
		return err
	}
	return f.File.Truncate(size)
}

func (f *crashFile) Sync() error {
	if err := f.c.call(); err != nil {
		return err
	}
	// What is durable is what was written before the fsync began: appends
	// racing with it may or may not be covered.
	fi, err := f.File.Stat()
	if err != nil {
		return err
	}
	b := make([]byte, fi.Size())
	if _, err := f.File.ReadAt(b, 0); err != nil {
		return err
	}
	if err := f.File.Sync(); err != nil {
		return err
	}
	f.c.mu.Lock()
	f.c.durable[f.path] = b
	f.c.mu.Unlock()
	return nil
}

func (c *crashFS) WriteFile(name string, data []byte, perm os.FileMode) error {
	if err := c.call(); err != nil {
		return err
	}
	_, statErr := os.Stat(name)
	if err := (eventlog.OS{}).WriteFile(name, data, perm); err != nil {
		return err
	}
	c.mu.Lock()
	c.durable[name] = bytes.Clone(data)
	if statErr != nil {
		c.named[name] = false
	}
	c.mu.Unlock()
	return nil
}

func (c *crashFS) Rename(oldpath, newpath string) error {
	if err := c.call(); err != nil {
		return err
	}
	if err := os.Rename(oldpath, newpath); err != nil {
		return err
	}
	c.mu.Lock()
	c.durable[newpath] = c.durable[oldpath]
	delete(c.durable, oldpath)
	c.named[newpath] = false // the new name needs its folder synced
	delete(c.named, oldpath)
	c.mu.Unlock()
	return nil
}

func (c *crashFS) Remove(name string) error {
	if err := c.call(); err != nil {
		return err
	}
	if err := os.Remove(name); err != nil {
		return err
	}
	// Gone at once; whether a power loss brings it back does not matter
	// to the files crashFS checks.
	c.mu.Lock()
	delete(c.durable, name)
	delete(c.named, name)
	c.mu.Unlock()
	return nil
}

func (c *crashFS) Lstat(name string) (os.FileInfo, error) { return os.Lstat(name) }

func (c *crashFS) SyncDir(dir string) error {
	if err := c.call(); err != nil {
		return err
	}
	if err := (eventlog.OS{}).SyncDir(dir); err != nil {
		return err
	}
	c.mu.Lock()
	for p := range c.named {
		if filepath.Dir(p) == filepath.Clean(dir) {
			c.named[p] = true
		}
	}
	c.mu.Unlock()
	return nil
}

// Power-loss modes: what becomes of the bytes written after a file's last
// fsync, and of names no folder fsync covered. "reorder" is a file system
// that persisted a later block of an event log's unsynced appends but not an
// earlier one (eventlog's reader takes that for a torn tail, spec §4.7); where
// the unsynced bytes do not cross a block boundary, or the file is not an
// event log, it falls back to drop, prefix, zero-tail or garbage-tail.
var powerModes = []string{"drop", "prefix", "zero-tail", "garbage-tail", "metadata", "reorder"}

// diskBlock is the unit in which the simulated disk persists a file's data,
// eventlog's tornBlock: a sector.
const diskBlock = 512

// lostBlock returns, for a file whose first durable bytes end at offset
// durable and which has pending unsynced bytes after them, how many of those
// lie before the first block boundary inside them: the bytes a power cut that
// persisted the later blocks but not that one leaves as zeros. It is 0 when
// no boundary falls inside the pending bytes (no later block to keep).
func lostBlock(durable, pending int) int {
	lost := diskBlock - durable%diskBlock
	if lost >= pending {
		return 0
	}
	return lost
}

// isEventLog says whether path is a task's live event log.
func isEventLog(path string) bool {
	ok, _ := filepath.Match("task_*.jsonl", filepath.Base(path))
	return ok
}

// Crash rewrites the real files to one state a power loss at the crash point
// could have left, and returns a description of it.
func (c *crashFS) Crash(rng *rand.Rand, mode string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var what []string
	paths := make([]string, 0, len(c.named))
	for p := range c.named {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if !c.named[p] && (mode == "metadata" || rng.IntN(4) == 0) {
			os.Remove(p)
			what = append(what, filepath.Base(p)+": lost (its folder was not synced)")
			continue
		}
		now, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		dur := c.durable[p]
		if !bytes.HasPrefix(now, dur) {
			continue // rewritten in place (not an append-only file): keep
		}
		pending := now[len(dur):]
		if len(pending) == 0 {
			continue
		}
		m := mode
		if mode == "reorder" {
			if lost := lostBlock(len(dur), len(pending)); lost > 0 && isEventLog(p) {
				// The block holding the first unsynced bytes never reached
				// the disk (zeros up to its end); later blocks did: all of
				// them, or (one time in four) up to where the disk lost the
				// tail too. Kept whole more often than not, so that the
				// later blocks hold a whole record now and then: the
				// unsynced bytes are seldom more than two records.
				cut := len(pending)
				if rng.IntN(4) == 0 {
					cut = lost + 1 + rng.IntN(len(pending)-lost)
				}
				img := append(append(bytes.Clone(dur), make([]byte, lost)...), pending[lost:cut]...)
				if err := os.WriteFile(p, img, 0o644); err != nil {
					panic(err)
				}
				c.reordered++
				what = append(what, fmt.Sprintf("%s: %d durable + %d unsynced bytes zeroed to the block boundary + %d of the %d unsynced bytes after it (reorder)",
					filepath.Base(p), len(dur), lost, cut-lost, len(pending)-lost))
				continue
			}
			m = powerModes[rng.IntN(4)] // drop, prefix, zero-tail or garbage-tail
		}
		keep := 0
		var tail []byte
		switch m {
		case "drop", "metadata":
		case "prefix":
			keep = rng.IntN(len(pending) + 1)
		case "zero-tail", "garbage-tail":
			keep = rng.IntN(len(pending) + 1)
			tail = make([]byte, 1+rng.IntN(len(pending)-keep+1))
			if m == "garbage-tail" {
				for i := range tail {
					tail[i] = byte(rng.UintN(256))
				}
			}
		}
		img := append(append(bytes.Clone(dur), pending[:keep]...), tail...)
		if err := os.WriteFile(p, img, 0o644); err != nil {
			panic(err)
		}
		what = append(what, fmt.Sprintf("%s: %d durable + %d of %d unsynced bytes + %d bytes of %s", filepath.Base(p), len(dur), keep, len(pending), len(tail), m))
	}
	return strings.Join(what, "; ")
}

// fakeShell runs "shell" bodies without a shell: once its STEP_START is
// durable it records the execution in eff/<step>/<retry> (an effect outside
// the simulated disk, like a call to another system) and fails when the
// command says "fail" and the attempt is below 2.
type fakeShell struct{}

func (fakeShell) Run(ctx context.Context, a *executor.Attempt) executor.Result {
	if err := a.Started(0); err != nil {
		return executor.Result{Err: err, ExitCode: -1, NotStarted: true}
	}
	dir := filepath.Join(a.Dir, "eff", a.StepID)
	if a.Cleanup {
		dir = filepath.Join(a.Dir, "cl", a.StepID)
	}
	os.MkdirAll(dir, 0o755)
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(a.RetryCount)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err == nil {
		f.WriteString("x\n")
		f.Close()
	}
	if strings.Contains(a.Command, "fail") && a.RetryCount < 2 && !a.Cleanup {
		return executor.Result{Err: errors.New("exit status 1"), ExitCode: 1, OutputDigest: "sha256:0"}
	}
	return executor.Result{OutputDigest: "sha256:0"}
}

const powerPipeline = `task_name: power
parallelism: 3
max_dirty_restarts: 100000
retry_delay_seconds: 0.01
steps:
  - id: a
    command: run a
    cleanup_command: clean a
  - id: b
    command: run b
    depends_on: [a]
    durability: batch
    cleanup_command: clean b
  - id: c
    command: run c
    depends_on: [a]
    durability: batch
  - id: d
    command: run d fail
    depends_on: [a]
    retry_policy: fixed
    max_retries: 3
    cleanup_command: clean d
  - id: once
    depends_on: [b, c]
    lua: |
      local fs = require("apollo.fs")
      return require("apollo.idem").once("notify", function()
        fs.append("external/notify", "sent\n")
        return "sent"
      end, {verify = function() return fs.exists("external/notify") and fs.read("external/notify") ~= "", "sent" end})
  - id: e
    command: run e
    depends_on: [once, d]
    durability: batch
  - id: f
    command: run f
    depends_on: [e]
`

// TestPowerLoss runs a pipeline in-process on crashFS, kills the "disk" at a
// random I/O call, rewrites the files as a power loss in a random mode would
// have left them, and "reboots" (crashing again during recovery three times
// in ten), until the task completes. After every reboot the log must read
// back (only a torn tail cut), every execution must have a durable
// STEP_START, no step may start again after a durable success, every rerun
// of a cut-off attempt must follow its CLEANUP; at the end the task is
// complete and the idem.once effect happened exactly once.
// APOLLO_POWER_LOSSES sets the number of power losses (CI: 300; -short: 10;
// long mode: 100,000); APOLLO_SEED replays.
func TestPowerLoss(t *testing.T) {
	losses := 300
	switch {
	case os.Getenv("APOLLO_LONG") != "":
		losses = 100_000
	case testing.Short():
		losses = 10
	}
	if n, err := strconv.Atoi(os.Getenv("APOLLO_POWER_LOSSES")); err == nil && n > 0 {
		losses = n
	}
	seed := uint64(time.Now().UnixNano() % 1e9)
	if n, err := strconv.ParseUint(os.Getenv("APOLLO_SEED"), 10, 64); err == nil {
		seed = n
	}
	t.Logf("APOLLO_SEED=%d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	run := func(dir string, fsys eventlog.FS) error {
		e := engine.New(engine.Options{StateDir: filepath.Join(dir, ".apollo"), Workdir: dir,
			Progress: engine.ProgressQuiet, KillGrace: 50 * time.Millisecond, FS: fsys,
			Executors: map[string]executor.Executor{"shell": fakeShell{}}, Crash: func(string) {}})
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		err := e.Run(ctx, filepath.Join(dir, "pipeline.yaml"), engine.RunOptions{TaskID: "p"})
		if ctx.Err() != nil {
			t.Errorf("a run hung for 60s (dir %s): %v", dir, err)
		}
		return err
	}
	setup := func() string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "pipeline.yaml"), []byte(powerPipeline), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	// How many I/O calls a clean run makes.
	probe := newCrashFS(0)
	if err := run(setup(), probe); err != nil {
		t.Fatalf("clean run: %v", err)
	}
	calls := probe.calls

	done, reboots, violations := 0, 0, 0
	modes := map[string]int{}
	// reordered counts the power losses in mode reorder that left an event
	// log with a lost block before kept later ones; laterTorn, those after
	// which the reader took a good record later than the next seq for part
	// of a torn tail, which only its out-of-order case accepts; laterCut,
	// the torn tails a resumed run cut that held such a record.
	reordered, laterTorn, laterCut := 0, 0, 0
	for done < losses && violations == 0 {
		dir := setup()
		var history []string
		cut := map[string]bool{} // side files counted in laterCut
		for round := 0; ; round++ {
			var fsys eventlog.FS
			var cfs *crashFS
			if round == 0 || (done < losses && rng.IntN(10) < 3) {
				cfs = newCrashFS(1 + rng.IntN(calls))
				fsys = cfs
			}
			err := run(dir, fsys)
			if cfs != nil && cfs.dead {
				mode := powerModes[rng.IntN(len(powerModes))]
				modes[mode]++
				done++
				history = append(history, fmt.Sprintf("power loss at call %d (%s): %s", cfs.crashAt, mode, cfs.Crash(rng, mode)))
				if cfs.reordered > 0 {
					reordered++
					if laterRecordsTorn(dir) {
						laterTorn++
					}
				}
			} else if err != nil {
				history = append(history, fmt.Sprintf("run %d: %v", round, err))
				if round > 3 {
					t.Errorf("seed %d: a run after the disk came back failed: %v\n%s", seed, err, strings.Join(history, "\n"))
					violations++
					break
				}
			}
			reboots++
			laterCut += laterRecordsCut(dir, cut)
			if v := checkPowerLog(dir, err == nil && (cfs == nil || !cfs.dead)); len(v) > 0 {
				t.Errorf("seed %d, %s:\n%s\nhistory:\n%s", seed, dir, strings.Join(v, "\n"), strings.Join(history, "\n"))
				violations++
				break
			}
			if err == nil && (cfs == nil || !cfs.dead) {
				break
			}
		}
	}
	t.Logf("powerloss seed=%d losses=%d reboots=%d modes=%v reorder-artifacts=%d later-records-torn=%d later-records-cut=%d violations=%d",
		seed, done, reboots, modes, reordered, laterTorn, laterCut, violations)
	// Mode reorder must not quietly become its fallback: about one loss in
	// four in that mode leaves the artifact (a run of 300 losses has some
	// fifty in that mode and about a dozen artifacts).
	if modes["reorder"] >= 40 && reordered == 0 {
		t.Errorf("seed %d: %d power losses in mode reorder left no event log with a lost block before later ones", seed, modes["reorder"])
	}
}

// laterRecordsTorn says whether the reader takes for a torn tail of the
// task's log in dir bytes that hold a good record later than the next seq:
// what only its out-of-order case accepts.
func laterRecordsTorn(dir string) bool {
	logs, _ := filepath.Glob(filepath.Join(dir, ".apollo", "logs", "task_p_*.jsonl"))
	if len(logs) == 0 {
		return false
	}
	sort.Strings(logs)
	_, tail, err := eventlog.ReadAll(logs[len(logs)-1], eventlog.ReadOptions{TaskID: "p"})
	if err != nil || tail.Torn == 0 {
		return false // a log that does not read back is checkPowerLog's to report
	}
	b, err := os.ReadFile(logs[len(logs)-1])
	if err != nil || tail.End+tail.Torn > int64(len(b)) {
		return false
	}
	for _, line := range bytes.Split(b[tail.End:tail.End+tail.Torn], []byte("\n")) {
		if r, err := eventlog.Decode(line); err == nil && r.Seq > tail.LastSeq+1 {
			return true
		}
	}
	return false
}

// laterRecordsCut returns how many torn-tail side files in dir, not yet in
// seen, hold a good record later than the next seq of their log: what a
// writer cuts when a power cut persisted a later block of unsynced appends
// but not an earlier one. It adds them to seen.
func laterRecordsCut(dir string, seen map[string]bool) int {
	sides, _ := filepath.Glob(filepath.Join(dir, ".apollo", "logs", "task_p_*.jsonl.torn-*"))
	n := 0
	for _, side := range sides {
		if seen[side] {
			continue
		}
		i := strings.LastIndex(side, ".torn-")
		off, err := strconv.Atoi(side[i+len(".torn-"):])
		if err != nil {
			continue
		}
		log, err1 := os.ReadFile(side[:i])
		torn, err2 := os.ReadFile(side)
		if err1 != nil || err2 != nil || off > len(log) {
			continue
		}
		next := int64(bytes.Count(log[:off], []byte("\n"))) + 1 // one record a line, seq from 1
		for _, line := range bytes.Split(torn, []byte("\n")) {
			if r, err := eventlog.Decode(line); err == nil && r.Seq > next {
				seen[side] = true
				n++
				break
			}
		}
	}
	return n
}

// checkPowerLog checks the invariants after a reboot; final says the last
// run completed.
func checkPowerLog(dir string, final bool) []string {
	var v []string
	logs, _ := filepath.Glob(filepath.Join(dir, ".apollo", "logs", "task_p_*.jsonl"))
	var recs []*eventlog.Record
	if len(logs) > 0 {
		sort.Strings(logs)
		var err error
		recs, _, err = eventlog.ReadAll(logs[len(logs)-1], eventlog.ReadOptions{TaskID: "p"})
		if err != nil {
			return []string{fmt.Sprintf("log does not read back: %v", err)}
		}
	}
	started := map[string]bool{}
	succeeded := map[string]bool{}
	last := map[string]*eventlog.Record{}
	cleaned := map[string]bool{}
	for _, r := range recs {
		switch r.EventType {
		case eventlog.StepStart:
			key := r.StepID + "/" + strconv.Itoa(r.RetryCount)
			if started[key] {
				v = append(v, fmt.Sprintf("attempt %s started twice", key))
			}
			started[key] = true
			if succeeded[r.StepID] {
				v = append(v, fmt.Sprintf("step %s started (seq %d) after it succeeded", r.StepID, r.Seq))
			}
			if p := last[r.StepID]; p != nil && p.EventType == eventlog.StepStart && !cleaned[r.StepID] {
				v = append(v, fmt.Sprintf("step %s reran cut-off attempt %d without a CLEANUP (seq %d)", r.StepID, p.RetryCount, r.Seq))
			}
			last[r.StepID], cleaned[r.StepID] = r, false
		case eventlog.StepEnd:
			if r.Status == eventlog.Success {
				succeeded[r.StepID] = true
			}
			last[r.StepID] = r
		case eventlog.Cleanup:
			cleaned[r.StepID] = true
		}
	}
	steps, _ := os.ReadDir(filepath.Join(dir, "eff"))
	for _, s := range steps {
		files, _ := os.ReadDir(filepath.Join(dir, "eff", s.Name()))
		for _, f := range files {
			if key := s.Name() + "/" + f.Name(); !started[key] {
				v = append(v, fmt.Sprintf("attempt %s ran without a durable STEP_START", key))
			}
		}
	}
	b, _ := os.ReadFile(filepath.Join(dir, "external", "notify"))
	if n := bytes.Count(b, []byte("\n")); n > 1 || (final && n != 1) {
		v = append(v, fmt.Sprintf("idem.once effect happened %d times", n))
	}
	if final {
		st := eventlog.Replay("p", recs)
		if !st.Complete() {
			v = append(v, "the final run returned success but the task is not complete")
		}
	}
	return v
}
