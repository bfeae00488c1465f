package luaproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"apollo/luart"
)

// The tests re-execute the test binary as the child: with childEnv set,
// TestMain serves jobs instead of running tests. The job is a testJob in
// JSON, a small language of things a child may do.

const childEnv = "LUAPROC_TEST_CHILD"

func TestMain(m *testing.M) {
	if mode, ok := os.LookupEnv(childEnv); ok {
		os.Exit(testChild(mode))
	}
	os.Exit(m.Run())
}

// testJob is what the test child does with a job.
type testJob struct {
	Op   string   `json:"op"`
	Data string   `json:"data,omitempty"`
	Reqs []string `json:"reqs,omitempty"`
	Code int      `json:"code,omitempty"`
	MB   int      `json:"mb,omitempty"`
	MS   int      `json:"ms,omitempty"`
	Lua  string   `json:"lua,omitempty"`
}

// meters are the ways a test child can bound memory (TestMeterModes).
var meters = map[string]meterConfig{
	"": defaultMeter,
	// RLIMIT_DATA alone, as much as the default allows.
	"rlimit": {rlimit: true, dataRatio: defaultMeter.dataRatio},
	// The Go memory limit at the limit, with the default's RLIMIT_DATA.
	"golimit": {goLimit: true, goLimitRatio: 1, rlimit: true, dataRatio: defaultMeter.dataRatio},
	// The heap meter on the heap's objects alone, at the limit.
	"objects": {sample: true, interval: defaultMeter.interval, hardRatio: 1},
}

func testChild(mode string) int {
	cfg, ok := meters[mode]
	if !ok {
		fmt.Fprintf(os.Stderr, "no meter %q\n", mode)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	// As Serve, but a job has one P for its first testWideAfter: long
	// enough that a short job on a loaded machine is never mistaken for a
	// long one (TestJobProcs).
	var out io.Writer = os.Stdout
	if path := os.Getenv(resultsEnv); path != "" {
		out = resultCounter{w: os.Stdout, path: path}
	}
	if err := serve(ctx, os.Stdin, out, testHandler, cfg, singleP(), testWideAfter); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// resultsEnv names a file the test child appends a line to once it has
// written a result frame (TestRunSentAnswersFirst).
const resultsEnv = "LUAPROC_TEST_RESULTS"

// resultCounter is the test child's stdout when resultsEnv is set.
type resultCounter struct {
	w    io.Writer
	path string
}

func (r resultCounter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err == nil && len(p) > 4 && p[4] == kindResult {
		if f, ferr := os.OpenFile(r.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644); ferr == nil {
			f.WriteString("result\n")
			f.Close()
		}
	}
	return n, err
}

func testHandler(ctx context.Context, raw []byte, call func([]byte) ([]byte, error)) ([]byte, error) {
	var job testJob
	if err := json.Unmarshal(raw, &job); err != nil {
		return nil, err
	}
	switch job.Op {
	case "echo":
		return []byte(job.Data), nil
	case "pid":
		return []byte(strconv.Itoa(os.Getpid())), nil
	case "procs":
		// How many Ps the job has after MS milliseconds.
		time.Sleep(time.Duration(job.MS) * time.Millisecond)
		return []byte(strconv.Itoa(runtime.GOMAXPROCS(0))), nil
	case "held":
		if _, err := call(nil); err != nil {
			return []byte("refused: " + err.Error()), nil
		}
		return []byte("go"), nil
	case "ask":
		var answers []string
		for _, r := range job.Reqs {
			ans, err := call([]byte(r))
			if err != nil {
				answers = append(answers, "error: "+err.Error())
				continue
			}
			answers = append(answers, string(ans))
		}
		return []byte(strings.Join(answers, ",")), nil
	case "fail":
		return nil, errors.New(job.Data)
	case "exit":
		fmt.Fprintln(os.Stderr, "leaving with", job.Code)
		os.Exit(job.Code)
	case "wait":
		call([]byte("running"))
		<-ctx.Done()
		return []byte(context.Cause(ctx).Error()), nil
	case "hang":
		signal.Ignore(syscall.SIGTERM)
		call([]byte("running"))
		select {}
	case "spawn":
		// A process in the child's group, left running.
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		os.WriteFile(job.Data, []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
		call([]byte("running"))
		<-ctx.Done()
		return nil, context.Cause(ctx)
	case "grow":
		keep = append(keep, make([]byte, job.MB<<20))
		for i := range keep[len(keep)-1] {
			keep[len(keep)-1][i] = 1
		}
		return []byte("grown"), nil
	case "hog":
		// One allocation the meter cannot see coming, over RLIMIT_DATA.
		keep = append(keep, make([]byte, job.MB<<20))
		return []byte("survived"), nil
	case "lua":
		return luaJob(ctx, job.Lua, job.MB)
	}
	return nil, fmt.Errorf("unknown op %q", job.Op)
}

// keep holds what the grow op allocates, so that it stays.
var keep [][]byte

func luaJob(ctx context.Context, code string, mb int) ([]byte, error) {
	s, err := luart.New(luart.Options{}).NewState(ctx, luart.StateOptions{MemoryLimitMB: mb, Unwatched: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	res, err := s.DoChunk("job.lua", code)
	if err != nil {
		return nil, err
	}
	var parts []string
	for _, v := range res {
		parts = append(parts, v.String())
	}
	return []byte(strings.Join(parts, " ")), nil
}

// testPool returns a pool of test children bounding memory as mode says.
// testWideAfter is the test child's wideAfter.
const testWideAfter = 250 * time.Millisecond

func testPool(t testing.TB, mode string, opts Options) *Pool {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	opts.Path = exe
	opts.Env = append(append(os.Environ(), opts.Env...), childEnv+"="+mode)
	p := New(opts)
	t.Cleanup(func() { p.Close() })
	return p
}

func jobJSON(j testJob) []byte {
	b, _ := json.Marshal(j)
	return b
}

func noRequests(context.Context, []byte) ([]byte, error) {
	return nil, errors.New("no requests expected")
}

// TestJobProcs: a child runs its jobs on one P, and a job that runs longer
// than wideAfter gets the child's Ps back (a job that allocates then has the
// collector on another core), until it ends.
func TestJobProcs(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{})
	procs := func(ms int) string {
		t.Helper()
		out, err := p.Run(t.Context(), jobJSON(testJob{Op: "procs", MS: ms}), Limits{}, noRequests)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	all := strconv.Itoa(runtime.GOMAXPROCS(0)) // the child's environment is this process's
	if got := procs(0); got != "1" {
		t.Errorf("a short job runs on %s Ps, want 1", got)
	}
	if got := procs(int(2 * testWideAfter / time.Millisecond)); got != all {
		t.Errorf("a job of twice %s runs on %s Ps after it, want the child's %s", testWideAfter, got, all)
	}
	if got := procs(0); got != "1" {
		t.Errorf("the short job after it runs on %s Ps, want 1", got)
	}
}

func TestRun(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{})
	out, err := p.Run(t.Context(), jobJSON(testJob{Op: "echo", Data: "hello"}), Limits{MemoryMB: 64}, noRequests)
	if err != nil || string(out) != "hello" {
		t.Fatalf("Run = %q, %v; want hello", out, err)
	}
	// The child is kept and used again.
	first, err := p.Run(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, noRequests)
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Run(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{MemoryMB: 1}, noRequests)
	if err != nil {
		t.Fatal(err)
	}
	if string(first) != string(second) || p.Started() != 1 {
		t.Errorf("pids %s and %s, %d children started; want one child for every job", first, second, p.Started())
	}
	_, err = p.Run(t.Context(), jobJSON(testJob{Op: "fail", Data: "boom"}), Limits{}, noRequests)
	var he *HandlerError
	if !errors.As(err, &he) || he.Msg != "boom" {
		t.Errorf("failing handler: %v, want a *HandlerError boom", err)
	}
}

// TestRequests: the child's requests are answered in order, each before the
// child goes on; an error answer reaches the child as an error.
func TestRequests(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{})
	var seen []string
	on := func(ctx context.Context, req []byte) ([]byte, error) {
		seen = append(seen, string(req))
		if string(req) == "bad" {
			return nil, errors.New("refused")
		}
		return []byte(strings.ToUpper(string(req))), nil
	}
	out, err := p.Run(t.Context(), jobJSON(testJob{Op: "ask", Reqs: []string{"a", "bad", "c"}}), Limits{}, on)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "A,error: refused,C"; got != want {
		t.Errorf("answers = %q, want %q", got, want)
	}
	if got, want := strings.Join(seen, ","), "a,bad,c"; got != want {
		t.Errorf("requests = %q, want %q", got, want)
	}
}

// TestChildDies: a child that exits mid-job fails the job with how it
// ended and its standard error; the next job gets a fresh child.
func TestChildDies(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{})
	_, err := p.Run(t.Context(), jobJSON(testJob{Op: "exit", Code: 3}), Limits{MemoryMB: 64}, noRequests)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Status != "exit status 3" || !strings.Contains(ee.Stderr, "leaving with 3") {
		t.Fatalf("error = %#v, want an *ExitError with exit status 3 and its stderr", err)
	}
	if errors.Is(err, ErrMemoryLimit) {
		t.Errorf("a plain exit counts as the memory limit")
	}
	out, err := p.Run(t.Context(), jobJSON(testJob{Op: "echo", Data: "again"}), Limits{}, noRequests)
	if err != nil || string(out) != "again" {
		t.Errorf("after a death: %q, %v", out, err)
	}
}

// TestStop: when the job's context ends the child gets SIGTERM, stops its
// job and exits; one that ignores SIGTERM is killed after the grace; what
// it started in its group is killed too.
func TestStop(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{})
	for _, tt := range []struct {
		op        string
		grace     time.Duration
		atLeast   time.Duration
		atMost    time.Duration
		spawnFile bool
	}{
		{op: "wait", grace: 5 * time.Second, atMost: 2 * time.Second},
		{op: "hang", grace: 300 * time.Millisecond, atLeast: 300 * time.Millisecond, atMost: 3 * time.Second},
		{op: "spawn", grace: 5 * time.Second, atMost: 2 * time.Second, spawnFile: true},
	} {
		t.Run(tt.op, func(t *testing.T) {
			cause := errors.New("stop now")
			ctx, cancel := context.WithCancelCause(t.Context())
			job := testJob{Op: tt.op}
			if tt.spawnFile {
				job.Data = filepath.Join(t.TempDir(), "pid")
			}
			done := make(chan struct{})
			running := make(chan struct{})
			on := func(context.Context, []byte) ([]byte, error) { close(running); return nil, nil }
			var err error
			var took time.Duration
			go func() {
				defer close(done)
				_, err = p.Run(ctx, jobJSON(job), Limits{KillGrace: tt.grace}, on)
			}()
			<-running
			began := time.Now()
			cancel(cause)
			<-done
			took = time.Since(began)
			if !errors.Is(err, cause) {
				t.Errorf("error = %v, want the context's cause", err)
			}
			if took < tt.atLeast || took > tt.atMost {
				t.Errorf("Run returned %s after the cancel, want between %s and %s", took, tt.atLeast, tt.atMost)
			}
			if tt.spawnFile {
				b, _ := os.ReadFile(job.Data)
				pid, _ := strconv.Atoi(string(b))
				if pid == 0 || !gone(pid, 2*time.Second) {
					t.Errorf("the process the child started (%d) outlived it", pid)
				}
			}
		})
	}
}

// gone waits up to d for pid to be gone (or a zombie).
func gone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			return true
		}
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return true
		}
		time.Sleep(10 * time.Millisecond)
	}
	return false
}

// memoryBombs allocate without end in Lua, in the ways the issue names.
var memoryBombs = []struct{ name, code string }{
	{"concat", `local s = "xxxxxxxx" for i = 1, 60 do s = s .. s end`},
	{"tables", `local t = {} for i = 1, 1e10 do t[i] = {i} end`},
	{"rep", `local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1048576) .. i end`},
	{"format", `local t = {} for i = 1, 1e9 do t[i] = string.format("%99999d", i) end`},
	{"coroutines", `local t = {} for i = 1, 1e9 do local co = coroutine.wrap(function(s) coroutine.yield(s) end) co(("z"):rep(4096) .. i) t[i] = co end`},
}

// TestMemoryLimit: each bomb fails with a *MemoryError under a 64 MiB limit;
// the child is replaced, and work that stays under the
// limit, garbage and all, is not stopped. Under -short one bomb (rep) is
// set off, not all five (seconds apiece); TestDiesOfMemory covers the
// child dying of its limit.
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{})
	bombs := memoryBombs
	if testing.Short() {
		bombs = slices.DeleteFunc(slices.Clone(bombs), func(b struct{ name, code string }) bool { return b.name != "rep" })
	}
	for _, b := range bombs {
		began := time.Now()
		_, err := p.Run(t.Context(), jobJSON(testJob{Op: "lua", Lua: b.code, MB: 64}), Limits{MemoryMB: 64}, noRequests)
		took := time.Since(began)
		var me *MemoryError
		if !errors.As(err, &me) || me.MemoryMB != 64 {
			t.Errorf("%s: error = %v, want a *MemoryError", b.name, err)
			continue
		}
		if got, want := err.Error(), "memory limit exceeded (memory_mb 64)"; got != want {
			t.Errorf("%s: message %q, want %q", b.name, got, want)
		}
		// A hang, not a slow machine: the root test TestMemoryBound holds
		// the engine to its deadline.
		if took > time.Minute {
			t.Errorf("%s: failed after %s, want within a minute", b.name, took)
		}
		t.Logf("%s: %s (died: %v)", b.name, took.Round(time.Millisecond), me.Died)
	}
	// 40 MiB kept while 400 MiB more pass through as garbage.
	if raceEnabled {
		t.Log("not checking work under the limit: -race's shadow memory counts against RLIMIT_DATA")
		return
	}
	out, err := p.Run(t.Context(), jobJSON(testJob{Op: "lua", MB: 64, Lua: `
		local keep = {}
		for i = 1, 40 do keep[i] = string.rep("k", 1048576 - 8) .. i end
		local n = 0
		for i = 1, 400 do local g = string.rep("g", 1048576 - 8) .. i n = n + #g end
		return #keep, n`}), Limits{MemoryMB: 64}, noRequests)
	if err != nil || !strings.HasPrefix(string(out), "40 ") {
		t.Errorf("work under the limit: %q, %v; want it to finish", out, err)
	}
}

// TestDiesOfMemory: a child that dies of RLIMIT_DATA (one allocation past
// it) fails its job with a *MemoryError that says so, unlike other deaths.
func TestDiesOfMemory(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("RLIMIT_DATA is set on Linux only")
	}
	t.Parallel()
	p := testPool(t, "", Options{})
	_, err := p.Run(t.Context(), jobJSON(testJob{Op: "hog", MB: 1024}), Limits{MemoryMB: 64}, noRequests)
	var me *MemoryError
	if !errors.As(err, &me) || !me.Died || err.Error() != "memory limit exceeded (memory_mb 64)" {
		t.Fatalf("error = %#v, want a *MemoryError with Died", err)
	}
}

// TestLimitsKept: a child keeps the limits it set for a job for the next
// job with the same limit; they bound that job as they bound the first: the
// heap meter stops a bomb, RLIMIT_DATA kills a child that allocates past it
// at once, and a job with a larger limit gets the larger limit.
func TestLimitsKept(t *testing.T) {
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skip("RLIMIT_DATA is set on Linux only")
	}
	t.Parallel()
	// warmed returns a pool whose one child ran a job limited to 64 MiB and
	// waits idle: the next job runs in it.
	warmed := func() *Pool {
		t.Helper()
		p := testPool(t, "", Options{})
		if _, err := p.Run(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{MemoryMB: 64}, noRequests); err != nil {
			t.Fatal(err)
		}
		if p.Started() != 1 {
			t.Fatalf("%d children started for one job", p.Started())
		}
		return p
	}
	_, err := warmed().Run(t.Context(), jobJSON(testJob{Op: "lua", Lua: memoryBombs[1].code, MB: 64}), Limits{MemoryMB: 64}, noRequests)
	var me *MemoryError
	if !errors.As(err, &me) {
		t.Errorf("a bomb in a child that ran a job with its limit: %v, want a *MemoryError", err)
	}
	_, err = warmed().Run(t.Context(), jobJSON(testJob{Op: "hog", MB: 1024}), Limits{MemoryMB: 64}, noRequests)
	if !errors.As(err, &me) || !me.Died {
		t.Errorf("one allocation past RLIMIT_DATA in a child that ran a job with its limit: %#v, want a *MemoryError with Died", err)
	}
	if raceEnabled {
		return
	}
	out, err := warmed().Run(t.Context(), jobJSON(testJob{Op: "grow", MB: 200}), Limits{MemoryMB: 256}, noRequests)
	if err != nil || string(out) != "grown" {
		t.Errorf("200 MiB under a limit of 256 after a job limited to 64: %q, %v", out, err)
	}
}

// TestRetire: a child that kept much of a job's memory is not given
// another job.
func TestRetire(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{})
	pid := func() string {
		out, err := p.Run(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, noRequests)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	before := pid()
	if _, err := p.Run(t.Context(), jobJSON(testJob{Op: "grow", MB: (retireGrowth >> 20) * 2}), Limits{}, noRequests); err != nil {
		t.Fatal(err)
	}
	if after := pid(); after == before {
		t.Errorf("the child that grew by %d MiB ran the next job", (retireGrowth>>20)*2)
	}
}

// TestFreshChildren: with MaxIdle < 0 every job gets a fresh child, and
// none is started ahead.
func TestFreshChildren(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{MaxIdle: -1})
	var pids []string
	for range 2 {
		out, err := p.Run(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, noRequests)
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, string(out))
	}
	if _, err := p.Run(t.Context(), jobJSON(testJob{Op: "exit", Code: 1}), Limits{}, noRequests); err == nil {
		t.Fatal("a child that exits mid-job: no error")
	}
	time.Sleep(100 * time.Millisecond) // a spare would be starting now
	if pids[0] == pids[1] || p.Started() != 3 {
		t.Errorf("pids %v, %d children started; want a fresh child for each of 3 jobs and no spare", pids, p.Started())
	}
	pid, _ := strconv.Atoi(pids[1])
	if !gone(pid, 3*time.Second) {
		t.Errorf("the child %d outlived its job", pid)
	}
}

// TestWarm: a pool warmed ahead runs its first job in the child it started
// then, rather than start another.
func TestWarm(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{})
	p.Warm()
	p.Warm() // one is being started: no second
	out, err := p.Run(t.Context(), jobJSON(testJob{Op: "echo", Data: "warm"}), Limits{}, noRequests)
	if err != nil || string(out) != "warm" {
		t.Fatalf("Run = %q, %v", out, err)
	}
	if p.Started() != 1 {
		t.Errorf("%d children started, want the one Warm started", p.Started())
	}
	fresh := testPool(t, "", Options{MaxIdle: -1})
	fresh.Warm()
	if fresh.Started() != 0 {
		t.Errorf("a pool that keeps no idle children started %d on Warm", fresh.Started())
	}
}

// TestRunSent: a held job's handler gets the go-ahead once sent has
// returned, or sent's error; a handler that does not wait for it leaves
// the child fit for the next job.
func TestRunSent(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{})
	var order []string
	sent := func(err error) func() error {
		return func() error { order = append(order, "sent"); return err }
	}
	out, err := p.RunSent(t.Context(), jobJSON(testJob{Op: "held"}), Limits{MemoryMB: 64}, sent(nil), noRequests)
	if err != nil || string(out) != "go" || len(order) != 1 {
		t.Errorf("RunSent = %q, %v (sent called %d times); want go, sent once", out, err, len(order))
	}
	out, err = p.RunSent(t.Context(), jobJSON(testJob{Op: "held"}), Limits{MemoryMB: 64}, sent(errors.New("no disk")), noRequests)
	if err != nil || string(out) != "refused: no disk" {
		t.Errorf("RunSent with a failing sent = %q, %v; want refused: no disk", out, err)
	}
	first, err := p.RunSent(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, sent(nil), noRequests)
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Run(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, noRequests)
	if err != nil || string(first) != string(second) || p.Started() != 1 {
		t.Errorf("after a held job whose handler did not wait: %q, %v, pids %s and %s, %d children started; want the same child", second, err, first, second, p.Started())
	}
}

// TestRunSentAnswersFirst: the handler of a held job that has no need of
// its go-ahead sends its result while the parent is still in sent, and the
// parent, finding it there, sends no go-ahead; the same child serves the
// next jobs, held or not, and one whose handler waits still gets its
// go-ahead.
func TestRunSentAnswersFirst(t *testing.T) {
	t.Parallel()
	results := filepath.Join(t.TempDir(), "results")
	p := testPool(t, "", Options{Env: []string{resultsEnv + "=" + results}})
	// sent returns once the child has written n results, or after 10 s.
	sentAfter := func(n int) func() error {
		return func() error {
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if b, _ := os.ReadFile(results); bytes.Count(b, []byte("result")) >= n {
					return nil
				}
			}
			return nil
		}
	}
	first, err := p.RunSent(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, sentAfter(1), noRequests)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(results); bytes.Count(b, []byte("result")) != 1 {
		t.Fatalf("the child wrote %d results while the parent was in sent; want its result before the go-ahead", bytes.Count(b, []byte("result")))
	}
	second, err := p.RunSent(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, sentAfter(2), noRequests)
	if err != nil || string(second) != string(first) {
		t.Errorf("the next held job = %q, %v; want the same child (%s)", second, err, first)
	}
	var sent bool
	out, err := p.RunSent(t.Context(), jobJSON(testJob{Op: "held"}), Limits{}, func() error { sent = true; return nil }, noRequests)
	if err != nil || string(out) != "go" || !sent {
		t.Errorf("a held job whose handler waits = %q, %v; want go", out, err)
	}
	third, err := p.Run(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, noRequests)
	if err != nil || string(third) != string(first) || p.Started() != 1 {
		t.Errorf("after held jobs: %q, %v, %d children started; want the same child, one started", third, err, p.Started())
	}
}

// TestIdleTimeout: an idle child ends after the idle timeout.
func TestIdleTimeout(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{IdleTimeout: 100 * time.Millisecond})
	out, err := p.Run(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, noRequests)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(string(out))
	if !gone(pid, 3*time.Second) {
		t.Errorf("the idle child %d is still running", pid)
	}
}

// TestParallel: jobs at once get a child each, and the pool keeps as many
// idle children as were busy at once.
func TestParallel(t *testing.T) {
	t.Parallel()
	p := testPool(t, "", Options{IdleTimeout: time.Minute})
	const n = 4
	var wg sync.WaitGroup
	pids := make([]string, n)
	release := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			on := func(context.Context, []byte) ([]byte, error) { <-release; return nil, nil }
			if _, err := p.Run(t.Context(), jobJSON(testJob{Op: "ask", Reqs: []string{"x"}}), Limits{}, on); err != nil {
				t.Error(err)
			}
			out, _ := p.Run(t.Context(), jobJSON(testJob{Op: "pid"}), Limits{}, noRequests)
			pids[i] = string(out)
		})
	}
	time.Sleep(300 * time.Millisecond)
	close(release)
	wg.Wait()
	if p.Started() != n {
		t.Errorf("%d children started for %d jobs at once, want %d", p.Started(), n, n)
	}
	p.mu.Lock()
	idle := len(p.idle)
	p.mu.Unlock()
	if idle != n {
		t.Errorf("%d idle children kept, want %d", idle, n)
	}
}

// TestOrphan: a child whose parent closes its stdin mid-job stops the job
// and returns.
func TestOrphan(t *testing.T) {
	t.Parallel()
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer inR.Close()
	outR, outW := io.Pipe()
	served := make(chan error, 1)
	running := make(chan struct{})
	var cause string
	h := func(ctx context.Context, job []byte, call func([]byte) ([]byte, error)) ([]byte, error) {
		close(running)
		<-ctx.Done()
		cause = context.Cause(ctx).Error()
		return nil, nil
	}
	go func() { served <- serve(t.Context(), inR, outW, h, meterConfig{}, 0, wideAfter) }()
	r := bufio.NewReader(outR)
	go io.Copy(io.Discard, r) // the hello and the result, which nobody reads
	var head [jobHeaderLen]byte
	if err := writeFrame(inW, kindJob, head[:], []byte("job")); err != nil {
		t.Fatal(err)
	}
	<-running
	inW.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve = %v, want nil", err)
		}
		if cause != errParentGone.Error() {
			t.Errorf("the job's cause = %q, want %q", cause, errParentGone)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("serve did not return after the parent left")
	}
}

func TestFrames(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	if err := writeFrame(&buf, kindResult, []byte{1}, []byte("abc")); err != nil {
		t.Fatal(err)
	}
	whole := append([]byte(nil), buf.Bytes()...)
	kind, body, err := readFrame(bufio.NewReader(&buf))
	if err != nil || kind != kindResult || string(body) != "\x01abc" {
		t.Errorf("readFrame = %q, %q, %v", kind, body, err)
	}
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(whole[:len(whole)-1]))); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a cut frame: %v, want io.ErrUnexpectedEOF", err)
	}
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader(nil))); err != io.EOF {
		t.Errorf("no frame: %v, want io.EOF", err)
	}
	if _, _, err := readFrame(bufio.NewReader(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff, 'R'}))); !errors.Is(err, errFrame) {
		t.Errorf("a huge length: %v, want errFrame", err)
	}
}

// BenchmarkRun is a round trip of a small job through a child (one
// request, as a step that records a marker makes) and, as the baseline in
// the same run, the same handler called in-process: ratio is the first
// over the second.
func BenchmarkRun(b *testing.B) {
	p := testPool(b, "", Options{})
	job := jobJSON(testJob{Op: "ask", Reqs: []string{"marker"}})
	on := func(context.Context, []byte) ([]byte, error) { return []byte("ok"), nil }
	local := func(req []byte) ([]byte, error) { return on(b.Context(), req) }
	var pooled, direct time.Duration
	for b.Loop() {
		began := time.Now()
		if _, err := p.Run(b.Context(), job, Limits{MemoryMB: 64}, on); err != nil {
			b.Fatal(err)
		}
		pooled += time.Since(began)
		began = time.Now()
		if _, err := testHandler(b.Context(), job, local); err != nil {
			b.Fatal(err)
		}
		direct += time.Since(began)
	}
	b.ReportMetric(float64(pooled.Microseconds())/float64(b.N), "pool-µs")
	b.ReportMetric(float64(direct.Nanoseconds())/1000/float64(b.N), "direct-µs")
	b.ReportMetric(float64(pooled)/float64(direct), "ratio")
}

// TestFaultsAtZero: the runtime's report of a SIGSEGV is read as it is
// written, one field per word and one line per report.
func TestFaultsAtZero(t *testing.T) {
	for _, c := range []struct {
		stderr string
		want   bool
	}{
		{"SIGSEGV: segmentation violation\nPC=0x433a5d m=7 sigcode=1 addr=0x0\n\ngoroutine 0 gp=0xc000 m=7 [idle]:\n", true},
		{"SIGSEGV: segmentation violation\nPC=0x433a5d m=7 sigcode=1 addr=0x0", true},
		{"SIGSEGV: segmentation violation\nPC=0x433a5d m=7 sigcode=1 addr=0x8\n", false},
		{"panic: addr=0x0\n", false},
	} {
		if got := faultsAtZero(c.stderr); got != c.want {
			t.Errorf("faultsAtZero(%q) = %v, want %v", c.stderr, got, c.want)
		}
	}
}
