package web

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"apollo/engine/history"
	"apollo/engine/statedir"
	"apollo/eventlog"
)

// writeFast writes a log of records straight from eventlog.Encode, without
// a writer's fsyncs: a fixture of ten thousand runs in seconds.
func writeFast(t testing.TB, path string, recs []*eventlog.Record) {
	t.Helper()
	var b []byte
	for i, r := range recs {
		r.Seq = int64(i + 1)
		line, err := eventlog.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(b, line...)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// perfFolder makes a state folder of runs runs of 6 steps each (every
// tenth failed), and one run of bigSteps steps, all done.
func perfFolder(t testing.TB, runs, bigSteps int) (dir, bigTask string) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "state")
	d := statedir.Dir{Root: dir}
	os.MkdirAll(d.Logs(), 0o755)
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	run := func(task string, start time.Time, steps int, fail bool) {
		var infos []eventlog.StepInfo
		for i := range steps {
			si := eventlog.StepInfo{ID: fmt.Sprintf("s%d", i), DependsOn: []string{}, DefinitionDigest: "sha256:" + strings.Repeat("0", 64)}
			if i > 0 {
				si.DependsOn = []string{fmt.Sprintf("s%d", (i-1)/2)}
			}
			infos = append(infos, si)
		}
		ts := start
		tick := func() string { ts = ts.Add(3 * time.Millisecond); return eventlog.FormatTime(ts) }
		recs := []*eventlog.Record{{Timestamp: tick(), TaskID: task, EventType: eventlog.TaskStart, Status: eventlog.Running,
			Start: &eventlog.StartInfo{Version: 1, TaskName: "perf", Pipeline: "perf.yaml", Steps: infos, Invocation: 1}}}
		status := eventlog.Success
		for i := range steps {
			id := infos[i].ID
			end := eventlog.Success
			if fail && i == steps-1 {
				end, status = eventlog.Failed, eventlog.Failed
			}
			recs = append(recs, &eventlog.Record{Timestamp: tick(), TaskID: task, StepID: id, EventType: eventlog.StepStart, Status: eventlog.Running},
				&eventlog.Record{Timestamp: tick(), TaskID: task, StepID: id, EventType: eventlog.StepEnd, Status: end, DurationMS: 3})
		}
		recs = append(recs, &eventlog.Record{Timestamp: tick(), TaskID: task, EventType: eventlog.TaskSummary, Status: status,
			Summary: &eventlog.SummaryInfo{Counts: map[string]int{status: steps}, Fsync: &eventlog.FsyncInfo{Count: int64(steps), TotalUS: int64(steps) * 200, MaxUS: 900}}})
		writeFast(t, d.Log(task, start.Unix()), recs)
	}
	for i := range runs {
		run(fmt.Sprintf("perf-%05d", i), at.Add(time.Duration(i)*time.Minute), 6, i%10 == 9)
	}
	bigTask = "big"
	run(bigTask, at.Add(-time.Hour), bigSteps, false)
	return dir, bigTask
}

// quantiles times fn n times and returns the 50th and 99th percentiles.
func quantiles(n int, fn func()) (p50, p99 time.Duration) {
	ds := make([]time.Duration, n)
	for i := range ds {
		start := time.Now()
		fn()
		ds[i] = time.Since(start)
	}
	slices.Sort(ds)
	return ds[n/2], ds[min(n-1, n*99/100)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// TestPerformanceFigures measures what docs/performance.md reports for
// apollo serve: start-up on 10,000 runs, page and API latency beside the
// CLI's list --json and inspect --json on the same data, and memory with
// 100 live pages. It asserts nothing and runs only with APOLLO_PERF=1:
//
//	APOLLO_PERF=1 go test -run TestPerformanceFigures -v ./engine/web/
func TestPerformanceFigures(t *testing.T) {
	if os.Getenv("APOLLO_PERF") != "1" {
		t.Skip("figures for docs/performance.md: run with APOLLO_PERF=1")
	}
	runs, bigSteps := 10_000, 10_000
	made := time.Now()
	dir, big := perfFolder(t, runs, bigSteps)
	t.Logf("fixture: %d runs of 6 steps and one of %d steps in %v", runs, bigSteps, time.Since(made).Round(time.Millisecond))
	exe := filepath.Join(t.TempDir(), "apollo")
	if out, err := exec.Command("go", "build", "-o", exe, "apollo").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	var startCPU time.Duration
	startServer := func() (*Server, context.CancelFunc, time.Duration, time.Duration) {
		runtime.GC()
		c0 := cpu()
		t0 := time.Now()
		s, err := New(Options{StateDirs: []string{dir}})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		s.Start(ctx)
		listed := time.Since(t0)
		startCPU = cpu() - c0
		for {
			if _, p := s.ix.progress(); p == 0 {
				break
			}
			time.Sleep(time.Millisecond)
		}
		return s, cancel, listed, time.Since(t0)
	}
	s, cancel, listed, read := startServer()
	t.Logf("| start, no index cache | answering in %s (%s of CPU) | every log read in %s |", ms(listed), ms(startCPU), ms(read))
	cancel()
	s.Wait()
	s.ix.save()
	s, cancel, listed, read = startServer()
	t.Logf("| start, with the index cache | answering in %s (%s of CPU) | every log read in %s |", ms(listed), ms(startCPU), ms(read))
	defer func() { cancel(); s.Wait() }()
	hs := httptest.NewServer(s.Handler())
	defer hs.Close()

	get := func(path string) func() {
		return func() {
			res, err := http.Get(hs.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("GET %s = %d", path, res.StatusCode)
			}
		}
	}
	cli := func(args ...string) func() {
		return func() {
			cmd := exec.Command(exe, append(args, "--state-dir", dir)...)
			cmd.Stdout = io.Discard
			if err := cmd.Run(); err != nil {
				t.Fatalf("apollo %v: %v", args, err)
			}
		}
	}
	inproc := func() {
		rs, err := history.Runs{Dir: statedir.Dir{Root: dir}}.List(history.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		history.WriteListJSON(io.Discard, rs)
	}
	bigLog := filepath.Base(func() string { p, _ := statedir.Dir{Root: dir}.LatestLog(big); return p }())
	get("/runs/0/" + bigLog)() // warm: the run's detail is read once
	for _, c := range []struct {
		what string
		n    int
		fn   func()
	}{
		{"GET /api/runs (10,001 runs)", 40, get("/api/runs")},
		{"GET / (runs page, first 200 of 10,001)", 40, get("/")},
		{"GET /api/runs?status=failed", 40, get("/api/runs?status=failed")},
		{"apollo list --json (same folder)", 10, cli("list", "--json")},
		{"history List + WriteListJSON in-process", 10, inproc},
		{"GET /api/runs/0/<big> (10,000 steps)", 40, get("/api/runs/0/" + bigLog)},
		{"GET /runs/0/<big> (run page)", 20, get("/runs/0/" + bigLog)},
		{"apollo inspect big --json", 10, cli("inspect", big, "--json")},
	} {
		p50, p99 := quantiles(c.n, c.fn)
		t.Logf("| %s | %s | %s | %d |", c.what, ms(p50), ms(p99), c.n)
	}

	// Memory with 100 live pages: 50 on the runs list, 50 on one run's page.
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	first := make(chan struct{}, 100)
	for i := range 100 {
		path := "/sse/runs"
		if i%2 == 1 {
			path = "/sse/runs/0/" + bigLog
		}
		req, _ := http.NewRequestWithContext(ctx, "GET", hs.URL+path, nil)
		go func() {
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				return
			}
			defer res.Body.Close()
			// Read past the first event, then throw the rest away: the
			// clients live in this process too, and must not weigh.
			br := bufio.NewReaderSize(res.Body, 4096)
			for {
				line, err := br.ReadSlice('\n')
				if err != nil && err != bufio.ErrBufferFull {
					return
				}
				if strings.HasPrefix(string(line), "data:") {
					break
				}
			}
			first <- struct{}{}
			io.Copy(io.Discard, br)
		}()
	}
	for range 100 {
		<-first
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	t.Logf("| 100 live pages open (%d) | heap in use %.1f MiB before, %.1f MiB with them | %.0f KiB a page |", s.hub.count(),
		float64(before.HeapInuse)/(1<<20), float64(after.HeapInuse)/(1<<20), float64(int64(after.HeapInuse)-int64(before.HeapInuse))/1024/100)
}
