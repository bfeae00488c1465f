package eventlog

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Durability settings (SPEC §4).
const (
	Always = "always"
	Batch  = "batch"
)

// WriterOptions configure a Writer.
type WriterOptions struct {
	// TaskID is written into every record and required of every record read.
	TaskID string
	// Durability is Always (every record fsynced before Append returns) or
	// Batch (only AppendDurable waits for an fsync; others share later ones).
	Durability string
	// Create makes Open fail if the log already exists.
	Create bool
	// First, when set, is the log's first record (its TASK_START), written
	// when Open creates the log: into a temporary file that is fsynced and
	// then renamed into place, so a log that exists always starts with a
	// durable record and a crash during creation leaves no log at all.
	// Open visits it like a replayed record.
	First *Record
	// FS is the file-system seam; nil means the real one.
	FS FS
	// Lock, when set, is the task lock the writer's process holds (the
	// runner's; apollo script holds none). Open and every append first
	// check, under the log's flock and before the record is written, that
	// it is still the file at the lock's path (TaskLock.Check, one
	// lstat(2)): if someone deleted or replaced the lock file, another
	// runner may be in, and the writer stops with a *LockLostError, its
	// sticky error, so two runners never write one log.
	Lock *TaskLock
	// Now is the clock for timestamps; nil means time.Now.
	Now func() time.Time
	// OnForeign is called, in order and under the writer's lock, with each
	// record another process (apollo script) appended since the last append.
	OnForeign func(*Record)
	// Publish, when set, is handed records' exact lines before they enter
	// the file, in order, the first numbered first and each next one the
	// seq after: a copy of the log kept elsewhere (the hub's, docs/spec.md
	// §8.8) takes them first, and the file follows with the same bytes.
	// Parallel appends are handed over together (publish.go), one call at a
	// time, with the log's flock held. Records another process appended
	// (OnForeign) are handed over as they are found. An error writes
	// nothing more: it becomes the writer's sticky error, as a
	// *PublishError.
	Publish func(first int64, lines [][]byte) error
	// PublishDurable says that Publish makes each record durable (the
	// hub's replicated log acknowledges it only once its nodes fsynced
	// it): an append that would wait for an fsync of the file returns
	// once Publish did instead, and the file, a copy that is completed from
	// the hub's after a crash, is fsynced by Sync and Close.
	PublishDurable bool
	// PublishLinger is the longest a record appended with AppendUnsynced
	// waits for an append that takes it along before it is published on
	// its own (lingerPublish when zero). A copy elsewhere where records
	// appended together cost one write (a replicated log's atomic batch)
	// gains from a longer one; the file, written once a record is
	// published, lags the run by as much.
	PublishLinger time.Duration
	// OnAppend is called, under the writer's lock, with each record this
	// writer appends and the log's size just after it.
	OnAppend func(r *Record, end int64)
	// After, when set, is a prefix of the log already replayed (a verified
	// snapshot): Open reads and visits only the records that follow it.
	After Prefix
	// Crash, when set, is called with a named crash point: "write:<EVENT>"
	// right after a record is written and before it is fsynced, and
	// "fsync:<EVENT>" right after the fsync that made it durable (<EVENT> is
	// the event type of the last record that fsync covered). Crash tests
	// kill the process there.
	Crash func(point string)
}

// Prefix is the start of a log: its size, the seq of its last record and the
// newest format version of its TASK_STARTs.
type Prefix struct {
	Offset  int64
	Seq     int64
	Version int
}

// WriteError is the sticky error of a writer whose write or fsync failed.
// After it, the writer refuses every append: what follows the last synced
// record is not known to be on disk. Its message states the problem; what
// to do about it (fix the disk, run again to resume) is the caller's to say.
type WriteError struct {
	Path string
	// LastSeq is the seq of the last record known to be on disk (fsynced).
	LastSeq int64
	Err     error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("event log %s: %v; the run stopped: nothing after record seq %d is known to be on disk",
		e.Path, e.Err, e.LastSeq)
}

func (e *WriteError) Unwrap() error { return e.Err }

// PublishError is the sticky error of a writer whose Publish refused a
// record: neither it nor anything after it was written to the file.
type PublishError struct {
	Path string
	Seq  int64
	Err  error
}

func (e *PublishError) Error() string {
	return fmt.Sprintf("event log %s: record seq %d: %v", e.Path, e.Seq, e.Err)
}

func (e *PublishError) Unwrap() error { return e.Err }

// publish hands lines, records first, first+1 ..., to Publish, if set.
func (w *Writer) publish(first int64, lines ...[]byte) error {
	if w.opts.Publish == nil || len(lines) == 0 {
		return nil
	}
	if err := w.opts.Publish(first, lines); err != nil {
		return &PublishError{Path: w.path, Seq: first, Err: err}
	}
	return nil
}

// NewerFormatError is a log that a newer apollo wrote to: this one must not
// append to it. Its message states the problem; the caller says what to do
// (continue with that apollo or a later one, or start the task over in a new
// log), in the terms of its commands.
type NewerFormatError struct {
	Path string
	// Line is the line of the newer TASK_START (its seq), 0 when it is not
	// known (a snapshot said so).
	Line    int
	Version int    // the log's format version
	Apollo  string // the version of the apollo that wrote it, if recorded
}

func (e *NewerFormatError) Error() string {
	what := fmt.Sprintf("%s: log format v%d is newer than this apollo's v%d", e.Path, e.Version, Version)
	if e.Line > 0 {
		by := "a newer apollo"
		if e.Apollo != "" {
			by = "apollo " + e.Apollo
		}
		what = fmt.Sprintf("%s:%d: this TASK_START is in log format v%d, newer than this apollo's v%d (written by %s)",
			e.Path, e.Line, e.Version, Version, by)
	}
	return what
}

// CheckFormat returns a *NewerFormatError when r, read from the log at path,
// is a TASK_START of a newer format than this apollo writes: what would act
// on the log (append to it, plan a resume) stops there.
func CheckFormat(path string, r *Record) error {
	if r.EventType == TaskStart && r.Start != nil && r.Start.Version > Version {
		return &NewerFormatError{Path: path, Line: int(r.Seq), Version: r.Start.Version, Apollo: r.Start.ApolloVersion}
	}
	return nil
}

// Writer appends records to one log. It is safe for concurrent use; parallel
// callers of durable appends share fsyncs (group commit). Each append takes
// the log's flock so that another process's appends never interleave.
type Writer struct {
	path string
	opts WriterOptions
	fsys FS

	mu      sync.Mutex // guards the fields below
	cond    sync.Cond  // on mu: an fsync ended, or the writes it held back are done
	f       File
	offset  int64
	seq     int64
	lines   int // lines in the file up to offset
	err     error
	flocked bool
	// synced is the offset known to be on disk and syncedSeq the seq of the
	// last record before it: what a WriteError can promise.
	synced    int64
	syncedSeq int64
	lastKind  string // event type of the last record written
	// syncing is set while an fsync runs. Writes wait for its outcome:
	// nothing is written once an fsync failed (a record appended then
	// could reach the disk behind data that fsync lost).
	syncing bool
	// held counts the writes waiting for the running fsync; the next fsync
	// waits for them, so that one fsync covers them all (group commit).
	held int
	// pending are the records queued for the next publication (with
	// Publish), publishing is set while an append leads one (publish.go).
	pending    []*queued
	publishing bool
	// lingering is set while linger, a timer, waits lingerFor to publish
	// what AppendUnsynced queued (publish.go).
	lingering bool
	linger    *time.Timer
	lingerFor time.Duration

	fsyncs  atomic.Int64
	records atomic.Int64
	// fsyncNanos and fsyncMaxNanos are the total and the longest time the
	// fsyncs took: the runner reports them in its TASK_SUMMARY.
	fsyncNanos    atomic.Int64
	fsyncMaxNanos atomic.Int64

	background sync.WaitGroup // fsyncs started by syncSoon, publications by a linger
}

// Open opens the log at path for appending, creating it (and fsyncing its
// folder) when it does not exist. Under the log's flock it reads every record
// (visit sees each), refuses a damaged log or one of another task, and repairs
// a torn tail: the cut bytes are saved to a side file and a WARNING is
// appended. It never follows a symbolic link at path, and refuses anything
// but a regular file there (an *UnsafeFileError).
func Open(path string, opts WriterOptions, visit func(*Record) error) (*Writer, error) {
	fsys := opts.FS
	if fsys == nil {
		fsys = OS{}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Durability == "" {
		opts.Durability = Always
	}
	w := &Writer{path: path, opts: opts, fsys: fsys, lingerFor: cmp.Or(opts.PublishLinger, lingerPublish)}
	w.cond.L = &w.mu
	if opts.Lock != nil {
		if err := opts.Lock.Check(); err != nil {
			return nil, err
		}
	}

	flag := os.O_RDWR | os.O_APPEND | unix.O_NOFOLLOW
	_, statErr := fsys.Lstat(path)
	created := false
	if opts.Create || errors.Is(statErr, fs.ErrNotExist) {
		flag |= os.O_CREATE | os.O_EXCL
		created = true
	}
	if created && opts.First != nil {
		err := w.createWith(opts.First)
		// The record is in the file now; a 100k-step run should not keep
		// its (large) TASK_START alive for as long as the writer lives.
		w.opts.First = nil
		if err != nil {
			return nil, err
		}
		flag &^= os.O_CREATE | os.O_EXCL
	}
	f, err := fsys.OpenFile(path, flag, 0o644)
	if err != nil {
		if ue := unsafeAt(fsys, path, err); ue != nil {
			return nil, ue
		}
		return nil, fmt.Errorf("open event log: %w", err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		err = notRegular(path, fi.Mode().Type(), nil)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open event log: %w", err)
	}
	w.f = f
	if created && opts.First == nil {
		if err := fsys.SyncDir(filepath.Dir(path)); err != nil {
			f.Close()
			return nil, fmt.Errorf("create event log %s: sync folder: %w", path, err)
		}
	}
	if err := w.flock(); err != nil {
		f.Close()
		return nil, err
	}
	defer w.funlock()
	if opts.Lock != nil {
		// Checked again under the log's flock: a runner that took a new
		// lock file has either not read the log yet or will see all this
		// writer does to it.
		if err := opts.Lock.Check(); err != nil {
			f.Close()
			return nil, err
		}
	}

	if visit == nil {
		visit = func(*Record) error { return nil }
	}
	if opts.After.Version > Version {
		f.Close()
		return nil, &NewerFormatError{Path: path, Version: opts.After.Version}
	}
	// Read through the file this writer appends to, not by name: the name
	// could be made to point elsewhere meanwhile.
	tail, err := read(f, path, ReadOptions{TaskID: opts.TaskID, Offset: opts.After.Offset, Seq: opts.After.Seq}, func(r *Record) error {
		// Stop at the first TASK_START of a newer apollo: what follows it
		// is in a format this one may misread.
		if err := CheckFormat(path, r); err != nil {
			return err
		}
		return visit(r)
	})
	if err != nil {
		f.Close()
		return nil, err
	}
	tail.Lines += int(opts.After.Seq) // a good log has one line per seq
	w.offset, w.seq, w.lines = tail.End, tail.LastSeq, tail.Lines
	w.synced, w.syncedSeq = tail.End, tail.LastSeq
	if tail.Torn > 0 {
		if err := w.repair(tail.End, tail.Torn); err != nil {
			f.Close()
			return nil, err
		}
	}
	return w, nil
}

// createWith creates the log holding only first (seq 1) with
// WriteFileAtomic: a crash before its rename leaves only a temporary file,
// which no reader looks at (TempPattern names it).
func (w *Writer) createWith(first *Record) error {
	if fi, err := w.fsys.Lstat(w.path); err == nil {
		if !fi.Mode().IsRegular() {
			return notRegular(w.path, fi.Mode().Type(), nil)
		}
		return fmt.Errorf("create event log %s: %w", w.path, os.ErrExist)
	}
	first.Seq = 1
	first.TaskID = w.opts.TaskID
	if first.Timestamp == "" {
		first.Timestamp = FormatTime(w.opts.Now())
	}
	line, err := Encode(first)
	if err != nil {
		return fmt.Errorf("create event log %s: %w", w.path, err)
	}
	if err := w.publish(1, line); err != nil {
		return err
	}
	w.fsyncs.Add(1)
	err = WriteFileAtomic(w.fsys, w.path, 0o644, func(f io.Writer) error {
		if _, err := f.Write(line); err != nil {
			return err
		}
		w.crash("write:" + first.EventType)
		return nil
	})
	if err != nil {
		// Nothing of this log exists yet: no record may be trusted.
		return &WriteError{Path: w.path, Err: fmt.Errorf("create: %w", err)}
	}
	w.records.Add(1)
	w.crash("fsync:" + first.EventType)
	return nil
}

// Path is the log's file name.
func (w *Writer) Path() string { return w.path }

// LastSeq is the seq of the last record appended or read.
func (w *Writer) LastSeq() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq
}

// Offset is the size of the log as this writer knows it.
func (w *Writer) Offset() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.offset
}

// Fsyncs is the number of fsyncs of the log so far.
func (w *Writer) Fsyncs() int64 { return w.fsyncs.Load() }

// FsyncTimes is the total and the longest time this writer's fsyncs took.
func (w *Writer) FsyncTimes() (total, longest time.Duration) {
	return time.Duration(w.fsyncNanos.Load()), time.Duration(w.fsyncMaxNanos.Load())
}

// datasync fsyncs f, counting the fsync and its time.
func (w *Writer) datasync(f File) error {
	w.fsyncs.Add(1)
	start := time.Now()
	err := datasync(f)
	d := time.Since(start).Nanoseconds()
	w.fsyncNanos.Add(d)
	for {
		m := w.fsyncMaxNanos.Load()
		if d <= m || w.fsyncMaxNanos.CompareAndSwap(m, d) {
			break
		}
	}
	return err
}

// Records is the number of records this writer appended.
func (w *Writer) Records() int64 { return w.records.Load() }

// Err is the writer's sticky error, nil while it is healthy.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Append writes r (assigning its seq, task id and, if empty, timestamp).
// With durability Always it returns once r is on disk (with Publish and
// PublishDurable: once it is published).
func (w *Writer) Append(r *Record) error {
	return w.append(r, w.opts.Durability == Always)
}

// AppendUnsynced writes r without starting or waiting for an fsync, whatever
// the durability setting: for a record that the caller makes durable with a
// later durable append, Sync or SyncSoon before anything depends on it.
// With Publish it waits for no publication either: r is queued, and
// published and written with the next append that waits (in the same
// publication, before it), by Sync, SyncSoon or Close, or by itself soon
// after (publish.go); r's seq is not set.
func (w *Writer) AppendUnsynced(r *Record) error {
	if w.opts.Publish != nil {
		return w.enqueueLater(r)
	}
	return w.append(r, false)
}

// SyncSoon starts an fsync of every record written so far (with Publish:
// the publication of every record queued, then that fsync) without waiting
// for it; a later durable append, Sync or Close waits for it, and a failure
// becomes the writer's sticky error.
func (w *Writer) SyncSoon() {
	if w.opts.Publish == nil {
		w.syncSoon(w.Offset())
		return
	}
	w.background.Add(1)
	go func() {
		defer w.background.Done()
		w.Sync()
	}()
}

// syncSoon starts an fsync up to offset end in the background; Close waits
// for it.
func (w *Writer) syncSoon(end int64) {
	w.background.Add(1)
	go func() {
		defer w.background.Done()
		w.syncTo(end)
	}()
}

// AppendDurable writes r and returns once it, and every record before it, is
// on disk, whatever the durability setting.
func (w *Writer) AppendDurable(r *Record) error {
	return w.append(r, true)
}

// AppendSyncing writes r and starts the fsync that makes it durable, without
// waiting for it: the caller may prepare its next move while the disk works,
// as long as that move's own durable append (AppendDurable, Sync, Close),
// which waits for this fsync, comes before anything that depends on r. A
// failed fsync becomes the writer's sticky error, so that append fails.
func (w *Writer) AppendSyncing(r *Record) error {
	if w.opts.Publish != nil {
		return w.append(r, false)
	}
	end, err := w.write(r)
	if err != nil {
		return err
	}
	w.syncSoon(end)
	return nil
}

// Sync makes every record appended so far durable (with Publish: published,
// written, and the file fsynced).
func (w *Writer) Sync() error {
	if w.opts.Publish != nil {
		w.mu.Lock()
		w.publishQueuedLocked()
		w.mu.Unlock()
	}
	return w.syncTo(w.Offset())
}

// Close makes every record durable and closes the file.
func (w *Writer) Close() error {
	err := w.Sync()
	w.mu.Lock()
	if w.lingering && w.linger.Stop() {
		w.lingering = false
		w.background.Done()
	}
	w.mu.Unlock()
	w.background.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return err
	}
	if cerr := w.f.Close(); cerr != nil && err == nil && w.err == nil {
		err = &WriteError{Path: w.path, LastSeq: w.seq, Err: fmt.Errorf("close: %w", cerr)}
	}
	w.f = nil
	return err
}

func (w *Writer) append(r *Record, durable bool) error {
	if w.opts.Publish != nil {
		end, err := w.enqueue(r)
		if err != nil || !durable || w.opts.PublishDurable {
			return err
		}
		return w.syncTo(end)
	}
	end, err := w.write(r)
	if err != nil {
		return err
	}
	if durable && !(w.opts.PublishDurable && w.opts.Publish != nil) {
		return w.syncTo(end)
	}
	return nil
}

// write writes r under the flock and returns the log's size after it. It
// waits while an fsync runs, and fails with the sticky error if that fsync
// failed.
func (w *Writer) write(r *Record) (int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waitForSyncLocked()
	if w.err != nil {
		return 0, w.err
	}
	if w.f == nil {
		return 0, fmt.Errorf("event log %s: append after close", w.path)
	}
	if err := w.lockForWrite(); err != nil {
		return 0, err
	}
	defer w.funlock()
	return w.writeLocked(r)
}

// waitForSyncLocked waits while an fsync runs, counted among the writes it
// holds back so that the next fsync covers them; w.mu is held.
func (w *Writer) waitForSyncLocked() {
	if !w.syncing {
		return
	}
	w.held++
	for w.syncing {
		w.cond.Wait()
	}
	w.held--
	if w.held == 0 {
		w.cond.Broadcast() // the next fsync may start
	}
}

// lockForWrite takes the log's flock, checks the task lock and catches up
// with what other processes appended; w.mu is held. On an error, the
// writer's sticky error, the flock is not held.
func (w *Writer) lockForWrite() error {
	if err := w.flock(); err != nil {
		w.failLocked(err)
		return w.err
	}
	if w.opts.Lock != nil {
		if err := w.opts.Lock.Check(); err != nil {
			w.funlock()
			w.failLocked(err)
			return w.err
		}
	}
	if err := w.catchUp(); err != nil {
		w.funlock()
		w.failLocked(err)
		return w.err
	}
	return nil
}

// writeLocked encodes and writes one record; w.mu and the flock are held.
func (w *Writer) writeLocked(r *Record) (int64, error) {
	r.Seq = w.seq + 1
	r.TaskID = w.opts.TaskID
	if r.Timestamp == "" {
		r.Timestamp = FormatTime(w.opts.Now())
	}
	line, err := Encode(r)
	if err != nil {
		return 0, err // nothing written: the log is intact
	}
	if err := w.publish(r.Seq, line); err != nil {
		w.failLocked(err)
		return 0, w.err
	}
	return w.writeLineLocked(r, line)
}

// writeLineLocked writes r, encoded as line with the next seq, to the file;
// w.mu and the flock are held.
func (w *Writer) writeLineLocked(r *Record, line []byte) (int64, error) {
	n, err := w.f.Write(line)
	if err != nil || n != len(line) {
		if err == nil {
			err = fmt.Errorf("short write (%d of %d bytes)", n, len(line))
		}
		w.failLocked(fmt.Errorf("write record seq %d: %w", r.Seq, err))
		return 0, w.err
	}
	w.seq++
	w.offset += int64(n)
	w.lines++
	w.lastKind = r.EventType
	w.records.Add(1)
	if w.opts.OnAppend != nil {
		w.opts.OnAppend(r, w.offset)
	}
	w.crash("write:" + r.EventType)
	return w.offset, nil
}

// syncTo makes the log durable at least up to offset end. Callers that
// arrive while another fsync runs are covered by the next one, which starts
// once the writes held back by the running one are done and syncs everything
// written by then: one fsync for many records. The fsync's outcome, a
// failure made the sticky error, is settled under w.mu before any write may
// go on.
func (w *Writer) syncTo(end int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		if w.err != nil {
			return w.err
		}
		if w.synced >= end {
			return nil
		}
		if !w.syncing && w.held == 0 {
			break
		}
		w.cond.Wait()
	}
	if w.f == nil {
		return fmt.Errorf("event log %s: sync after close", w.path)
	}
	target, seq, f, kind := w.offset, w.seq, w.f, w.lastKind
	w.syncing = true
	w.mu.Unlock()
	err := w.datasync(f)
	w.mu.Lock()
	w.syncing = false
	w.cond.Broadcast()
	if err != nil {
		w.failLocked(fmt.Errorf("fsync: %w", err))
		return w.err
	}
	if target > w.synced { // a repair under w.mu may have synced further
		w.synced, w.syncedSeq = target, seq
	}
	w.crash("fsync:" + kind)
	return nil
}

func (w *Writer) crash(point string) {
	if w.opts.Crash != nil {
		w.opts.Crash(point)
	}
}

// failLocked makes err the writer's sticky error: a *LockLostError as it
// is, anything else a *WriteError whose LastSeq is the last record known to
// be durable (records written since may not be on disk).
func (w *Writer) failLocked(err error) {
	if w.err != nil {
		return
	}
	var we *WriteError
	var lost *LockLostError
	var pe *PublishError
	switch {
	case errors.As(err, &we):
		w.err = we
	case errors.As(err, &lost):
		w.err = lost
	case errors.As(err, &pe):
		w.err = pe
	default:
		w.err = &WriteError{Path: w.path, LastSeq: w.syncedSeq, Err: err}
	}
}

// catchUp reads records another process appended since our last append and
// repairs a torn tail such a process left; w.mu and the flock are held.
func (w *Writer) catchUp() error {
	fi, err := w.f.Stat()
	if err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	size := fi.Size()
	if size == w.offset {
		return nil
	}
	if size < w.offset {
		return fmt.Errorf("the log shrank from %d to %d bytes while apollo was writing it", w.offset, size)
	}
	buf := make([]byte, size-w.offset)
	if _, err := w.f.ReadAt(buf, w.offset); err != nil {
		return fmt.Errorf("read records appended by another process: %w", err)
	}
	tail, err := scan(bytes.NewReader(buf), int64(len(buf)), w.path, ReadOptions{TaskID: w.opts.TaskID, Offset: w.offset, Seq: w.seq}, w.lines,
		func(r *Record) error {
			if w.opts.OnForeign != nil {
				w.opts.OnForeign(r)
			}
			return nil
		})
	if err != nil {
		return err
	}
	if w.opts.Publish != nil {
		// One line per record in a good log: hand them over as they are in
		// the file.
		var lines [][]byte
		for _, line := range bytes.SplitAfter(buf[:tail.End-w.offset], []byte("\n")) {
			if len(line) > 0 {
				lines = append(lines, line)
			}
		}
		if err := w.publish(w.seq+1, lines...); err != nil {
			return err
		}
	}
	w.offset, w.seq, w.lines = tail.End, tail.LastSeq, w.lines+tail.Lines
	if tail.Torn > 0 {
		return w.repairLocked(tail.End, tail.Torn)
	}
	return nil
}

// repair cuts a torn tail of n bytes at offset end, keeping the bytes in a
// side file and recording a WARNING. Each step can be repeated after a crash.
func (w *Writer) repair(end, n int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.repairLocked(end, n); err != nil {
		w.failLocked(err)
		return w.err
	}
	return nil
}

func (w *Writer) repairLocked(end, n int64) error {
	torn := make([]byte, n)
	if _, err := w.f.ReadAt(torn, end); err != nil {
		return fmt.Errorf("repair torn tail: read: %w", err)
	}
	side := fmt.Sprintf("%s.torn-%d", w.path, end)
	err := WriteFileAtomic(w.fsys, side, 0o644, func(f io.Writer) error {
		_, err := f.Write(torn)
		return err
	})
	if err != nil {
		return fmt.Errorf("repair torn tail: save cut bytes: %w", err)
	}
	if err := w.f.Truncate(end); err != nil {
		return fmt.Errorf("repair torn tail: truncate to %d: %w", end, err)
	}
	if err := w.datasync(w.f); err != nil {
		return fmt.Errorf("repair torn tail: fsync: %w", err)
	}
	w.offset = end
	if end == 0 {
		// The first record was cut. A log begins with a TASK_START, so the
		// side file alone tells of this repair.
		return nil
	}
	_, err = w.writeLocked(&Record{
		EventType: Warning,
		Status:    Running,
		Message: fmt.Sprintf("torn tail repaired: %d bytes at offset %d (a write cut off by a crash) were cut and saved to %s",
			n, end, filepath.Base(side)),
		Intervention: &Intervention{Action: ActionTornTail, By: "apollo"},
	})
	if err != nil {
		return err
	}
	if err := w.datasync(w.f); err != nil {
		return fmt.Errorf("repair torn tail: fsync: %w", err)
	}
	w.synced, w.syncedSeq = w.offset, w.seq
	return nil
}

func (w *Writer) flock() error {
	if err := flock(int(w.f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock event log %s: %w", w.path, err)
	}
	w.flocked = true
	return nil
}

func (w *Writer) funlock() {
	if w.flocked {
		_ = flock(int(w.f.Fd()), unix.LOCK_UN)
		w.flocked = false
	}
}
