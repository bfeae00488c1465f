package web

import (
	"bufio"
	"bytes"
	"encoding/gob"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"apollo/engine/history"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// runKey names a run: its state folder (by position) and its log's name.
type runKey struct {
	SD   int
	Name string
}

// durationBuckets are the upper bounds, in seconds, of the step duration
// histogram.
var durationBuckets = []float64{0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600}

// runStats is what /metrics needs of one run, kept for finished runs in the
// index cache so that a scrape reads no log.
type runStats struct {
	figures
	timeline  []attempt
	warnings  []*eventlog.Record
	openStart map[string]int // step#retry -> index in timeline
	// records counts the records applied; changed[step] is the count when
	// a record last touched the step, so that a live page sends only the
	// steps changed since its last event.
	records int
	changed map[string]int
}

// figures are a run's counts for /metrics, kept in the index cache.
type figures struct {
	Attempts map[string]int // by result
	Buckets  []uint64       // step durations, per durationBuckets (+Inf last)
	DurSum   float64
	DurCount uint64
	Fsyncs   int64
	FsyncUS  int64
	FsyncMax int64
}

// attempt is one bar of the timeline: a step attempt from its STEP_START to
// its STEP_END (or the end of the invocation that cut it off).
type attempt struct {
	Step   string    `json:"step"`
	Retry  int       `json:"attempt"`
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"` // zero while it runs
	Status string    `json:"status"`
}

// result names the outcome of a STEP_END for the attempts metric.
func result(r *eventlog.Record) string {
	switch {
	case r.TimedOut:
		return "timed_out"
	case r.Interrupted:
		return "interrupted"
	case r.Status == eventlog.Success:
		return "success"
	case r.Status == eventlog.Skipped:
		return "skipped"
	case r.Status == eventlog.Running:
		return "retried"
	}
	return "failed"
}

func (s *runStats) apply(r *eventlog.Record) {
	s.records++
	if s.changed == nil {
		s.changed = map[string]int{}
	}
	if r.StepID != "" {
		s.changed[r.StepID] = s.records
	}
	if r.Intervention != nil {
		for _, id := range r.Intervention.Steps {
			s.changed[id] = s.records
		}
	}
	switch r.EventType {
	case eventlog.StepStart:
		if s.openStart == nil {
			s.openStart = map[string]int{}
		}
		s.openStart[r.StepID+"#"+itoa(r.RetryCount)] = len(s.timeline)
		s.timeline = append(s.timeline, attempt{Step: r.StepID, Retry: r.RetryCount, Start: r.Time(), Status: eventlog.Running})
	case eventlog.StepEnd:
		res := result(r)
		if s.Attempts == nil {
			s.Attempts = map[string]int{}
		}
		s.Attempts[res]++
		if res == "skipped" {
			return
		}
		d := float64(r.DurationMS) / 1000
		if s.Buckets == nil {
			s.Buckets = make([]uint64, len(durationBuckets)+1)
		}
		i := sort.SearchFloat64s(durationBuckets, d)
		s.Buckets[i]++
		s.DurSum += d
		s.DurCount++
		key := r.StepID + "#" + itoa(r.RetryCount)
		if i, ok := s.openStart[key]; ok {
			a := &s.timeline[i]
			a.End, a.Status = r.Time(), r.Status
			if r.Status == eventlog.Running {
				a.Status = eventlog.Failed // failed, to be retried
			}
			delete(s.openStart, key)
		}
	case eventlog.TaskStart:
		// What the last invocation left open was cut off by a crash.
		for key, i := range s.openStart {
			a := &s.timeline[i]
			if a.End.IsZero() {
				a.End, a.Status = a.Start, "DIRTY"
				if n := len(s.timeline); n > 0 {
					a.End = maxTime(a.Start, r.Time())
				}
			}
			delete(s.openStart, key)
		}
	case eventlog.Warning:
		s.warnings = append(s.warnings, r)
	case eventlog.TaskSummary:
		if r.Summary != nil && r.Summary.Fsync != nil {
			f := r.Summary.Fsync
			s.Fsyncs += f.Count
			s.FsyncUS += f.TotalUS
			s.FsyncMax = max(s.FsyncMax, f.MaxUS)
		}
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// run is one log in the index.
type run struct {
	key runKey
	f   statedir.LogFile

	mu   sync.Mutex
	size int64
	mod  time.Time
	// info is the run's list entry as of the last read, without a runner;
	// finished says its last invocation has a summary, so info is final
	// until the log grows.
	info     history.RunInfo
	enc      []byte // info as /api/runs writes it, while finished
	finished bool
	loaded   bool
	stats    runStats
	// sum, off and seq follow a log read incrementally; nil when the run's
	// detail was let go (a finished run not looked at).
	sum      *history.Summary
	off, seq int64
	torn     int64
	lastUse  time.Time
}

// index knows every run of the state folders, each read once and then
// followed as its log grows.
type index struct {
	dirs []statedir.Dir
	now  func() time.Time

	mu    sync.RWMutex
	runs  map[runKey]*run
	order []*run // newest first, as apollo list
	// newest is each task's newest live log per folder: only it can be
	// running.
	newest  map[string]*run
	pending int // runs not read yet
	changed func(keys []runKey)
	saveMu  sync.Mutex
	// hubSD is the folder that copies the hub's logs, -1 for none;
	// hubHolder says who holds its tasks.
	hubSD     int
	hubHolder func(taskID string) (pid int, held bool)
}

func newIndex(dirs []statedir.Dir, now func() time.Time) *index {
	return &index{dirs: dirs, now: now, runs: map[runKey]*run{}, newest: map[string]*run{}, changed: func([]runKey) {}, hubSD: -1}
}

// cacheEntry is one finished run in the index cache.
type cacheEntry struct {
	Name    string
	Size    int64
	ModNS   int64
	Info    history.RunInfo
	Figures figures
}

// cacheFile is the index cache: gob, which reads ten thousand entries in a
// fraction of the time JSON takes; it is apollo serve's own derived file.
type cacheFile struct {
	V    int
	Runs []cacheEntry
}

// cachePath is where the index keeps what it knows of finished runs: a
// derived file, safe to delete.
func cachePath(d statedir.Dir) string { return filepath.Join(d.Root, "serve", "index.gob") }

// scan lists the logs of every folder, takes what the cache knows of them,
// and returns the runs that must be read: those the cache does not know,
// then those it does, whose size and time a read checks first (so that
// the server answers before it has looked at ten thousand files).
func (ix *index) scan() []*run {
	var todo, check []*run
	seen := map[runKey]bool{}
	for sd, d := range ix.dirs {
		cache := map[string]cacheEntry{}
		if f, err := os.Open(cachePath(d)); err == nil {
			var cf cacheFile
			if gob.NewDecoder(bufio.NewReader(f)).Decode(&cf) == nil && cf.V == 1 {
				for _, e := range cf.Runs {
					cache[e.Name] = e
				}
			}
			f.Close()
		}
		files, _ := d.AllLogs(d.Archive())
		for _, f := range files {
			k := runKey{sd, filepath.Base(f.Path)}
			seen[k] = true
			ix.mu.RLock()
			_, ok := ix.runs[k]
			ix.mu.RUnlock()
			if ok {
				continue
			}
			r := &run{key: k, f: f}
			if e, ok := cache[k.Name]; ok && f.Regular {
				r.size, r.mod, r.info, r.finished, r.loaded = e.Size, time.Unix(0, e.ModNS), e.Info, true, true
				r.stats.figures = e.Figures
				check = append(check, r)
			} else {
				r.info = history.RunInfo{TaskID: f.TaskID, Log: f.Path, Archived: f.Archived, Status: "unfinished",
					StartedAt: eventlog.FormatTime(time.Unix(f.Start, 0))}
				todo = append(todo, r)
			}
			ix.mu.Lock()
			ix.runs[k] = r
			ix.mu.Unlock()
		}
	}
	ix.mu.Lock()
	var gone []runKey
	for k := range ix.runs {
		if !seen[k] {
			delete(ix.runs, k)
			gone = append(gone, k)
		}
	}
	todo = append(todo, check...)
	ix.pending += len(todo)
	ix.resort()
	ix.mu.Unlock()
	if len(gone) > 0 {
		ix.changed(gone)
	}
	return todo
}

// resort orders the runs as apollo list does; ix.mu is held.
func (ix *index) resort() {
	ix.order = ix.order[:0]
	for _, r := range ix.runs {
		ix.order = append(ix.order, r)
	}
	slices.SortFunc(ix.order, func(a, b *run) int {
		switch {
		case a.f.Start != b.f.Start:
			if a.f.Start > b.f.Start {
				return -1
			}
			return 1
		case a.f.TaskID != b.f.TaskID:
			if a.f.TaskID < b.f.TaskID {
				return -1
			}
			return 1
		case a.f.Archived != b.f.Archived:
			if !a.f.Archived {
				return -1
			}
			return 1
		case a.key.SD != b.key.SD:
			return a.key.SD - b.key.SD
		}
		return 0
	})
	ix.newest = map[string]*run{}
	for _, r := range ix.order {
		k := itoa(r.key.SD) + "/" + r.f.TaskID
		if _, ok := ix.newest[k]; !ok && !r.f.Archived {
			ix.newest[k] = r
		}
	}
}

// readAll reads the runs todo with two workers (the machine has other
// work), then drops what is not needed of finished ones.
func (ix *index) readAll(todo []*run) {
	work := make(chan *run)
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				ix.refresh(r, false)
				ix.mu.Lock()
				ix.pending--
				ix.mu.Unlock()
			}
		}()
	}
	for _, r := range todo {
		work <- r
	}
	close(work)
	wg.Wait()
}

// refresh reads what was appended to r's log since the last read (all of
// it when the file was replaced or the detail let go) and reports whether
// anything changed. keep keeps the replayed state for a page.
func (ix *index) refresh(r *run, keep bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	fi, err := os.Lstat(r.f.Path)
	if err != nil {
		return false
	}
	if keep {
		r.lastUse = ix.now()
	}
	if r.loaded && fi.Size() == r.size && fi.ModTime().Equal(r.mod) && (r.sum != nil || !keep) {
		return false
	}
	if r.sum == nil || fi.Size() < r.off || r.f.Archived || r.torn > 0 {
		r.sum, r.off, r.seq, r.torn = history.NewSummary(r.f), 0, 0, 0
		r.stats = runStats{}
	}
	if r.f.Regular {
		opts := eventlog.ReadOptions{TaskID: r.f.TaskID, Offset: r.off, Seq: r.seq}
		visit := func(rec *eventlog.Record) error {
			r.sum.Apply(rec)
			r.stats.apply(rec)
			return nil
		}
		var tail eventlog.Tail
		if r.f.Archived {
			tail, err = statedir.ReadLog(r.f.Path, opts, visit)
		} else {
			tail, err = eventlog.Read(r.f.Path, opts, visit)
		}
		if err != nil {
			var ce *eventlog.CorruptError
			if errors.As(err, &ce) || r.f.Archived {
				r.sum.Fail(err)
			}
		}
		r.off, r.seq, r.torn = tail.End, tail.LastSeq, tail.Torn
	}
	r.size, r.mod, r.loaded = fi.Size(), fi.ModTime(), true
	r.info, r.enc = r.sum.Info(false, 0, ix.now()), nil
	st := r.sum.State()
	r.finished = r.info.Status == "corrupt" || (st.Summary != nil && r.torn == 0)
	if r.finished && !keep && time.Since(r.lastUse) > time.Minute {
		r.sum, r.stats.timeline, r.stats.warnings, r.stats.openStart, r.stats.changed = nil, nil, nil, nil, nil
	}
	return true
}

// touch refreshes the run whose log is path (a watcher saw it change) and
// tells the subscribers; a log not in the index makes it rescan.
func (ix *index) touch(sd int, name string) {
	ix.mu.RLock()
	r, ok := ix.runs[runKey{sd, name}]
	ix.mu.RUnlock()
	if !ok {
		todo := ix.scan()
		ix.readAll(todo)
		keys := make([]runKey, len(todo))
		for i, r := range todo {
			keys[i] = r.key
		}
		ix.changed(keys)
		return
	}
	if _, err := os.Lstat(r.f.Path); errors.Is(err, os.ErrNotExist) {
		todo := ix.scan() // gone: the scan drops it and says so
		ix.readAll(todo)
		keys := make([]runKey, len(todo))
		for i, r := range todo {
			keys[i] = r.key
		}
		ix.changed(keys)
		return
	}
	if ix.refresh(r, r.hasDetail()) {
		ix.changed([]runKey{r.key})
	}
}

func (r *run) hasDetail() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sum != nil && time.Since(r.lastUse) < 10*time.Minute
}

// holder says whether a runner holds r's task, and its pid: the task lock
// in its state folder, or the lease in the hub for the hub's copy.
func (ix *index) holder(r *run) (int, bool) {
	if r.key.SD == ix.hubSD {
		if ix.hubHolder == nil {
			return 0, false
		}
		return ix.hubHolder(r.f.TaskID)
	}
	return eventlog.Holder(ix.dirs[r.key.SD].Lock(r.f.TaskID))
}

// shadowed reports whether r is the hub's copy of a log that one of the
// state folders holds with as much in it (the coordinator ran here, or
// rebuilt its log here): the run is listed and counted once, from the
// state folder. A state folder's copy that lags the hub's (its
// coordinator moved to another host) is not the same any more, and both
// are shown.
func (ix *index) shadowed(r *run) bool {
	if r.key.SD != ix.hubSD {
		return false
	}
	r.mu.Lock()
	size := r.size
	r.mu.Unlock()
	for sd := range ix.dirs {
		if sd == ix.hubSD {
			continue
		}
		ix.mu.RLock()
		l := ix.runs[runKey{sd, r.key.Name}]
		ix.mu.RUnlock()
		if l == nil {
			continue
		}
		l.mu.Lock()
		lsize := l.size
		l.mu.Unlock()
		if lsize >= size {
			return true
		}
	}
	return false
}

// get returns the run of key.
func (ix *index) get(k runKey) *run {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.runs[k]
}

// entry is a run's list entry now: running (with the runner's pid) when a
// runner holds the task of a run not finished.
func (ix *index) entry(r *run) history.RunInfo {
	r.mu.Lock()
	info := r.info
	finished := r.finished
	var sum *history.Summary
	if !finished {
		sum = r.sum
	}
	r.mu.Unlock()
	if finished || r.f.Archived {
		return info
	}
	ix.mu.RLock()
	newest := ix.newest[itoa(r.key.SD)+"/"+r.f.TaskID] == r
	ix.mu.RUnlock()
	if !newest {
		return info
	}
	pid, held := ix.holder(r)
	if sum != nil {
		r.mu.Lock()
		info = sum.Info(held, pid, ix.now())
		r.mu.Unlock()
	} else if held {
		info.Status, info.PID = "running", pid
	}
	return info
}

// list returns the runs newest first.
func (ix *index) list() []*run {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return slices.Clone(ix.order)
}

// progress returns how many runs are known and how many are still to read.
func (ix *index) progress() (total, pending int) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return len(ix.runs), ix.pending
}

// save writes the cache of finished runs of each folder.
func (ix *index) save() {
	ix.saveMu.Lock()
	defer ix.saveMu.Unlock()
	for sd, d := range ix.dirs {
		cf := cacheFile{V: 1}
		for _, r := range ix.list() {
			if r.key.SD != sd {
				continue
			}
			r.mu.Lock()
			if r.finished && r.loaded {
				cf.Runs = append(cf.Runs, cacheEntry{Name: r.key.Name, Size: r.size, ModNS: r.mod.UnixNano(), Info: r.info, Figures: r.stats.figures})
			}
			r.mu.Unlock()
		}
		var buf bytes.Buffer
		if gob.NewEncoder(&buf).Encode(cf) != nil {
			continue
		}
		data := buf.Bytes()
		path := cachePath(d)
		if os.MkdirAll(filepath.Dir(path), 0o755) != nil {
			continue
		}
		tmp := path + ".tmp"
		if os.WriteFile(tmp, data, 0o644) == nil {
			os.Rename(tmp, path)
		}
	}
}

// detail is a run's replayed state and timeline, for its pages.
type detail struct {
	report *history.Report
	// records is the number of records read; changed[step] the record
	// count when a record last touched the step.
	records  int
	changed  map[string]int
	timeline []attempt
	warnings []*eventlog.Record
	// start is the latest TASK_START's description of the run (nil before
	// one), taken under the run's lock.
	start *eventlog.StartInfo
}

// detail reads the run up to now and reports on it as inspect does.
func (ix *index) detail(r *run) *detail {
	if ix.refresh(r, true) {
		ix.changed([]runKey{r.key})
	}
	var runner history.RunnerInfo
	if !r.f.Archived {
		ix.mu.RLock()
		newest := ix.newest[itoa(r.key.SD)+"/"+r.f.TaskID] == r
		ix.mu.RUnlock()
		if newest {
			runner.PID, runner.Held = ix.holder(r)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sum == nil {
		return nil
	}
	st := r.sum.State()
	return &detail{report: history.NewReport(st, r.f.Path, r.sum.Records(), r.torn, runner),
		timeline: slices.Clone(r.stats.timeline), warnings: slices.Clone(r.stats.warnings), start: st.Start,
		records: r.stats.records, changed: maps.Clone(r.stats.changed)}
}
