package engine

import (
	"fmt"
	"io"
	"os"
	"sync"

	"apollo/eventlog"
)

// snapshotEvery is how many records a run appends between two snapshots. A
// task with more steps than that waits for as many records as it has steps,
// so that the cost of writing snapshots stays linear in the log.
const snapshotEvery = 10_000

// snapshotter keeps the run's replay of the log, fed with every record in
// log order (those read at open, those this run appends, those another
// process appends), and writes it as a snapshot (docs/spec.md §4) every
// snapshotEvery records and at the end of an invocation. Its state is the
// run's state (run.state): one replay, not two, since a 100,000-step state
// is tens of megabytes. The writer's callbacks change it under mu, so the
// run reads it only while no step runs.
type snapshotter struct {
	path    string
	logPath string
	fsys    eventlog.FS
	warn    io.Writer

	mu      sync.Mutex // held by the writer's callbacks: never append under it
	state   *eventlog.State
	end     int64 // the log's size after the last record applied; 0 if unknown
	version int   // newest format version of the log's TASK_STARTs
	since   int   // records applied since the last snapshot
	written int64 // seq of the last snapshot written
}

// newSnapshotter makes the snapshotter of one log. crash, when set, is
// called at the crash points inside a snapshot write (see snapshotCrashFS).
func newSnapshotter(path, logPath, taskID string, fsys eventlog.FS, warn io.Writer, crash func(string)) *snapshotter {
	if fsys == nil {
		fsys = eventlog.OS{}
	}
	if crash != nil {
		fsys = snapshotCrashFS{FS: fsys, crash: crash}
	}
	return &snapshotter{path: path, logPath: logPath, fsys: fsys, warn: warn, state: eventlog.NewState(taskID)}
}

// snapshotCrashFS names the middle of a snapshot write as crash points:
// "snapshot:written" once the temporary file is written and fsynced, before
// its rename, and "snapshot:renamed" after the rename, before the folder is
// fsynced. Crash tests kill the runner there.
type snapshotCrashFS struct {
	eventlog.FS
	crash func(point string)
}

func (f snapshotCrashFS) OpenFile(name string, flag int, perm os.FileMode) (eventlog.File, error) {
	file, err := f.FS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return snapshotCrashFile{File: file, crash: f.crash}, nil
}

func (f snapshotCrashFS) Rename(oldpath, newpath string) error {
	err := f.FS.Rename(oldpath, newpath)
	if err == nil {
		f.crash("snapshot:renamed")
	}
	return err
}

// snapshotCrashFile is the temporary file of a snapshot: its fsync is the
// last step of writing it.
type snapshotCrashFile struct {
	eventlog.File
	crash func(point string)
}

func (f snapshotCrashFile) Sync() error {
	err := f.File.Sync()
	if err == nil {
		f.crash("snapshot:written")
	}
	return err
}

// load starts from a verified snapshot: its state becomes the run's.
func (s *snapshotter) load(snap *eventlog.Snapshot) *eventlog.State {
	s.state, s.end, s.version, s.written = snap.State, snap.Offset, snap.LogVersion, snap.Seq
	return s.state
}

// replayed takes a record read when the log is opened.
func (s *snapshotter) replayed(r *eventlog.Record) {
	s.apply(r, 0)
}

// appended takes a record this run appended; end is the log's size after it.
func (s *snapshotter) appended(r *eventlog.Record, end int64) {
	s.apply(r, end)
}

// foreign takes a record another process appended; where it ends is not
// known, so no snapshot is written until this run appends again.
func (s *snapshotter) foreign(r *eventlog.Record) {
	s.apply(r, 0)
}

func (s *snapshotter) apply(r *eventlog.Record, end int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state.Apply(r)
	s.end = end
	s.since++
	if r.EventType == eventlog.TaskStart && r.Start != nil && r.Start.Version > s.version {
		s.version = r.Start.Version
	}
}

// step returns a copy of step id's state, read under the lock the
// writer's callbacks hold: the run's state is this one, and steps append
// (and so apply records) from their own goroutines.
func (s *snapshotter) step(id string) eventlog.StepState {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *s.state.Step(id)
}

// opened records the log's size once Open has read it.
func (s *snapshotter) opened(w *eventlog.Writer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state.LastSeq == w.LastSeq() {
		s.end = w.Offset()
	}
	s.since = 0
}

// due reports whether enough records have been appended for a snapshot.
func (s *snapshotter) due() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.since >= max(snapshotEvery, len(s.state.Steps))
}

// write saves the state as a snapshot. A failure is a warning: the log is
// the authority and a resume without a snapshot only reads more.
func (s *snapshotter) write() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.end == 0 || s.state.LastSeq == 0 || s.state.LastSeq == s.written {
		return
	}
	s.since = 0
	snap, err := eventlog.NewSnapshot(s.logPath, s.end, s.state.LastSeq, s.version, s.state)
	if err == nil {
		err = eventlog.WriteSnapshot(s.fsys, s.path, snap)
	}
	if err != nil {
		fmt.Fprintf(s.warn, "apollo: warning: %v (the next resume replays the whole log)\n", err)
		return
	}
	s.written = s.state.LastSeq
}
