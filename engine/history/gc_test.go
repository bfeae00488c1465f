package history_test

import (
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"apollo/engine"
	"apollo/engine/clock"
	"apollo/engine/history"
	"apollo/engine/internal/golden"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

func TestParseAge(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "30d", want: 30 * 24 * time.Hour},
		{in: "1.5d", want: 36 * time.Hour},
		{in: "0d", want: 0},
		{in: "12h", want: 12 * time.Hour},
		{in: "90m", want: 90 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "0", want: 0},
		{in: "", bad: true},
		{in: "d", bad: true},
		{in: "30", bad: true},
		{in: "30x", bad: true},
		{in: "-1d", bad: true},
		{in: "-5m", bad: true},
		{in: "NaNd", bad: true},
		{in: "Infd", bad: true},
		{in: "1e9d", bad: true},
	}
	for _, tt := range tests {
		got, err := history.ParseAge(tt.in)
		if tt.bad {
			if err == nil {
				t.Errorf("history.ParseAge(%q) = %v, nil; want an error", tt.in, got)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("history.ParseAge(%q) = %v, %v; want %v, nil", tt.in, got, err, tt.want)
		}
	}
}

// tree lists the files under dir with their sizes, for before/after
// comparisons.
func tree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			lines = append(lines, rel+"/")
		} else {
			lines = append(lines, rel+" "+strings.Repeat("#", int(min(fi.Size(), 50))))
		}
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// gunzip returns the content of a gzip file.
func gunzip(t *testing.T, path string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

const day = 24 * time.Hour

// gcFixture makes a state directory whose runs end at known times:
// old (finished 45 days before now), recent (5 days before), cut off
// (old but unfinished), stopped (old, interrupted: resumable), held (old,
// finished, a runner holds it) and two (two logs, both old and finished).
func gcFixture(t *testing.T) (dir string, opts engine.Options) {
	t.Helper()
	dir = t.TempDir()
	state := filepath.Join(dir, ".apollo")
	now := testEpoch.Add(50 * day)
	yaml := "task_name: demo\nsteps:\n  - id: a\n    command: echo out\n"
	for _, r := range []struct {
		id  string
		age time.Duration
	}{{"old", 45 * day}, {"recent", 5 * day}} {
		if err, _, _ := runPipeline(t, dir, yaml, engine.RunOptions{TaskID: r.id}, engine.Options{Clock: clock.NowFunc(testClock(now.Add(-r.age)))}); err != nil {
			t.Fatalf("Run %s = %v", r.id, err)
		}
		if err := os.MkdirAll(filepath.Join(state, "state"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(statedir.Dir{Root: state}.Snapshot(r.id), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := func(d time.Duration) func() time.Time { return testClock(now.Add(-45*day + d)) }
	writeLog(t, state, "cut", now.Add(-45*day).Unix(), old(0), startRec("x"), stepRec(eventlog.StepStart, "x", eventlog.Running, 0))
	writeLog(t, state, "held", now.Add(-45*day).Unix(), old(0), startRec("x"), summaryRec(eventlog.Failed, false))
	writeLog(t, state, "stopped", now.Add(-45*day).Unix(), old(0), startRec("x"), summaryRec(eventlog.Failed, true))
	writeLog(t, state, "two", now.Add(-45*day).Unix(), old(0), startRec("x"), summaryRec(eventlog.Failed, false))
	torn := writeLog(t, state, "two", now.Add(-44*day).Unix(), old(day), startRec("x"), summaryRec(eventlog.Success, false))
	if err := os.WriteFile(torn+".torn-123", []byte("cut bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	lock, err := eventlog.LockTask(statedir.Dir{Root: state}.Lock("held"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Unlock() })
	return dir, engine.Options{StateDir: state, Clock: clock.NowFunc(func() time.Time { return now })}
}

// TestGC checks what gc archives, removes and keeps, that a dry run
// changes nothing, and that archived logs are the logs, byte for byte.
func TestGC(t *testing.T) {
	dir, opts := gcFixture(t)
	state := opts.StateDir
	lay := statedir.Dir{Root: state}
	e := runsOf(opts)

	before := tree(t, dir)
	dry, err := e.GC(history.GCOptions{OlderThan: 30 * day, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if after := tree(t, dir); after != before {
		t.Errorf("a dry run changed files:\nbefore\n%s\nafter\n%s", before, after)
	}

	oldLog, _ := lay.LatestLog("old")
	oldBytes, _ := os.ReadFile(oldLog)
	twoLogs, _ := lay.TaskLogs("two")
	res, err := e.GC(history.GCOptions{OlderThan: 30 * day})
	if err != nil {
		t.Fatal(err)
	}
	summary := func(r *history.GCResult) (archived, kept string) {
		var a, k []string
		for _, x := range r.Archived {
			a = append(a, x.TaskID+":"+x.Status)
		}
		for _, x := range r.Kept {
			k = append(k, x.TaskID+":"+x.Reason)
		}
		return strings.Join(a, " "), strings.Join(k, " ")
	}
	gotA, gotK := summary(res)
	if want := "old:succeeded two:failed two:succeeded"; gotA != want {
		t.Errorf("archived %q, want %q", gotA, want)
	}
	if want := "cut:unfinished held:running recent:recent stopped:unfinished"; gotK != want {
		t.Errorf("kept %q, want %q", gotK, want)
	}
	if dryA, dryK := summary(dry); dryA != gotA || dryK != gotK {
		t.Errorf("dry run said archived %q kept %q; the run did %q, %q", dryA, dryK, gotA, gotK)
	}
	if k := res.Kept[1]; k.PID != os.Getpid() {
		t.Errorf("held task kept with pid %d, want this process's, %d", k.PID, os.Getpid())
	}

	// The old run's log is in the archive, byte for byte; its output and
	// snapshot are gone, its artifacts kept.
	gz := filepath.Join(state, "archive", filepath.Base(oldLog)+".gz")
	if got := gunzip(t, gz); !bytes.Equal(got, oldBytes) {
		t.Errorf("archived log differs from the log")
	}
	for _, gone := range []string{oldLog, lay.Outputs("old"), lay.Snapshot("old"), twoLogs[0].Path, twoLogs[1].Path, twoLogs[1].Path + ".torn-123"} {
		if _, err := os.Stat(gone); err == nil {
			t.Errorf("%s still exists", gone)
		}
	}
	if got := gunzip(t, filepath.Join(state, "archive", filepath.Base(twoLogs[1].Path)+".torn-123.gz")); string(got) != "cut bytes" {
		t.Errorf("archived torn side file = %q", got)
	}
	for _, kept := range []string{lay.Artifacts("old"), lay.Outputs("recent"), lay.Snapshot("recent"), lay.Lock("old")} {
		if _, err := os.Stat(kept); err != nil {
			t.Errorf("%s was removed: %v", kept, err)
		}
	}
	if want := []string{lay.Outputs("old"), lay.Snapshot("old")}; strings.Join(res.Removed, " ") != strings.Join(want, " ") {
		t.Errorf("removed %q, want %q", res.Removed, want)
	}

	// The archived task still reads: inspect finds the newest archived log.
	rep, err := e.Inspect("two")
	if err != nil {
		t.Fatalf("Inspect(two) = %v", err)
	}
	if !rep.Archived || rep.Status != "complete" || !strings.HasSuffix(rep.Log, filepath.Base(twoLogs[1].Path)+".gz") {
		t.Errorf("Inspect(two) = archived %v, status %s, log %s; want the newest archived log, complete", rep.Archived, rep.Status, rep.Log)
	}

	// A second gc finds nothing more to do.
	again, err := e.GC(history.GCOptions{OlderThan: 30 * day})
	if err != nil {
		t.Fatal(err)
	}
	if len(again.Archived) != 0 || len(again.Removed) != 0 {
		t.Errorf("second gc archived %v, removed %v; want nothing", again.Archived, again.Removed)
	}
}

// TestGCAgeBoundary checks that a run is old only when its last record is
// strictly before now minus the limit.
func TestGCAgeBoundary(t *testing.T) {
	tests := []struct {
		name   string
		offset time.Duration // now minus (last record + limit)
		want   string
	}{
		{"newer", -time.Nanosecond, history.KeepRecent},
		{"exactly the limit", 0, history.KeepRecent},
		{"older", time.Nanosecond, "archived"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			state := t.TempDir()
			path := writeLog(t, state, "x", testEpoch.Unix(), testClock(testEpoch), startRec("a"), summaryRec(eventlog.Success, false))
			recs, _, err := eventlog.ReadAll(path, eventlog.ReadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			last := recs[len(recs)-1].Time()
			now := last.Add(7*day + tt.offset)
			res, err := runsOf(engine.Options{StateDir: state, Clock: clock.NowFunc(func() time.Time { return now })}).GC(history.GCOptions{OlderThan: 7 * day})
			if err != nil {
				t.Fatal(err)
			}
			got := "archived"
			if len(res.Kept) > 0 {
				got = res.Kept[0].Reason
			}
			if got != tt.want {
				t.Errorf("gc = %s, want %s", got, tt.want)
			}
		})
	}
}

// TestGCAfterCrash checks that gc finishes the job when a crash left both
// the archived copy and the log (the copy is renamed into place before the
// log is removed), and that a temporary file left by a crash is ignored.
func TestGCAfterCrash(t *testing.T) {
	state := t.TempDir()
	path := writeLog(t, state, "x", testEpoch.Unix(), testClock(testEpoch), startRec("a"), summaryRec(eventlog.Success, false))
	archive := filepath.Join(state, "archive")
	if err := os.MkdirAll(archive, 0o755); err != nil {
		t.Fatal(err)
	}
	// The copy a crash left: renamed into place, the log not yet removed.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	data, _ := os.ReadFile(path)
	zw.Write(data)
	zw.Close()
	if err := os.WriteFile(filepath.Join(archive, filepath.Base(path)+".gz"), gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(archive, "."+filepath.Base(path)+".gz.tmp-1"), []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	want, _ := os.ReadFile(path)
	e := runsOf(engine.Options{StateDir: state, Clock: clock.NowFunc(func() time.Time { return testEpoch.Add(100 * day) })})
	res, err := e.GC(history.GCOptions{OlderThan: day})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Archived) != 1 {
		t.Fatalf("archived %v, want the log", res.Archived)
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("the log is still there")
	}
	if got := gunzip(t, filepath.Join(archive, filepath.Base(path)+".gz")); !bytes.Equal(got, want) {
		t.Errorf("archive differs from the log")
	}
	runs, err := e.List(history.ListOptions{All: true})
	if err != nil || len(runs) != 1 || !runs[0].Archived || runs[0].Status != "succeeded" {
		t.Errorf("List(All) = %+v, %v; want the one archived run", runs, err)
	}
}

// TestGCCustomArchive checks --archive: the logs go there, and inspect
// reads them when given the path.
func TestGCCustomArchive(t *testing.T) {
	state := t.TempDir()
	writeLog(t, state, "x", testEpoch.Unix(), testClock(testEpoch), startRec("a"), summaryRec(eventlog.Success, false))
	archive := filepath.Join(t.TempDir(), "cold")
	e := runsOf(engine.Options{StateDir: state, Clock: clock.NowFunc(func() time.Time { return testEpoch.Add(100 * day) })})
	res, err := e.GC(history.GCOptions{OlderThan: day, Archive: archive})
	if err != nil || len(res.Archived) != 1 {
		t.Fatalf("GC = %+v, %v", res, err)
	}
	if _, err := e.Inspect("x"); err == nil {
		t.Errorf("Inspect(x) found a log; the archive is not the default one")
	}
	rep, err := e.Inspect(res.Archived[0].Archive)
	if err != nil || rep.TaskID != "x" || rep.Status != "complete" {
		t.Errorf("Inspect(archive path) = %+v, %v", rep, err)
	}
}

// TestGCJSON is the golden test of apollo gc --json.
func TestGCJSON(t *testing.T) {
	dir, opts := gcFixture(t)
	res, err := runsOf(opts).GC(history.GCOptions{OlderThan: 30 * day})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := history.WriteGCJSON(&b, res); err != nil {
		t.Fatal(err)
	}
	golden.JSON(t, "gc", b.Bytes(), dir)
	b.Reset()
	history.WriteGC(&b, res)
	for _, want := range []string{"archived " + dir, "removed " + dir, "kept " + dir, "running (pid ", "gc: 3 run(s) archived"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("history.WriteGC() =\n%s\nwant it to contain %q", b.String(), want)
		}
	}
}

// TestGCIncludeUnfinished: with --include-unfinished, a task whose newest
// run could be resumed is archived too, by its outcome.
func TestGCIncludeUnfinished(t *testing.T) {
	_, opts := gcFixture(t)
	res, err := runsOf(opts).GC(history.GCOptions{OlderThan: 30 * day, IncludeUnfinished: true})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, a := range res.Archived {
		got[a.TaskID] = a.Status
	}
	if got["cut"] != "unfinished" || got["stopped"] != "interrupted" {
		t.Errorf("archived %v; want cut (unfinished) and stopped (interrupted) too", got)
	}
}
