package engine

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
	"gopkg.in/yaml.v3"

	"apollo/engine/executor"
	"apollo/engine/pipeline"
	"apollo/eventlog"
)

// Benchmarks of the engine, each paired with the baseline it is judged
// against and measured in the same run (the `ratio` metric). None asserts a
// timing: the figures go into docs/performance.md.

// countFS counts the fsyncs of the event log (group commit).
type countFS struct {
	eventlog.OS
	syncs *atomic.Int64
}

func (c countFS) OpenFile(name string, flag int, perm os.FileMode) (eventlog.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return countFile{f, c.syncs}, nil
}

type countFile struct {
	*os.File
	syncs *atomic.Int64
}

// Sync does what the writer does with a real file (datasync).
func (f countFile) Sync() error {
	f.syncs.Add(1)
	return datasync(f.File)
}

// noSyncFS skips every fsync: what the engine costs beyond its fsyncs.
type noSyncFS struct{ eventlog.OS }

func (noSyncFS) OpenFile(name string, flag int, perm os.FileMode) (eventlog.File, error) {
	f, err := os.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

func (noSyncFS) WriteFile(name string, data []byte, perm os.FileMode) error {
	return os.WriteFile(name, data, perm)
}

func (noSyncFS) SyncDir(string) error { return nil }

type noSyncFile struct{ *os.File }

func (noSyncFile) Sync() error { return nil }

// pipelineYAML writes a pipeline of n steps with the given body. shape is
// chain (each step depends on the previous), wide (one root, n-2 steps
// under it, one step joining them all) or flat (no edges).
func pipelineYAML(n int, shape, durability string, parallel int, body string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "task_name: bench\nparallelism: %d\ndurability: %s\nsteps:\n", parallel, durability)
	for i := range n {
		fmt.Fprintf(&b, "  - id: s%d\n    %s\n", i, body)
		switch {
		case i == 0 || shape == "flat":
		case shape == "chain":
			fmt.Fprintf(&b, "    depends_on: [s%d]\n", i-1)
		case shape == "wide" && i < n-1:
			b.WriteString("    depends_on: [s0]\n")
		case shape == "wide":
			b.WriteString("    depends_on: [")
			for j := 1; j < n-1; j++ {
				if j > 1 {
					b.WriteString(", ")
				}
				fmt.Fprintf(&b, "s%d", j)
			}
			b.WriteString("]\n")
		}
	}
	return b.String()
}

const (
	bodyTrue = `command: "true"`
	bodyNoop = `lua: "return nil"`
)

// benchRun runs the pipeline at path once in a fresh state folder under
// dir, and returns how long it took.
func benchRun(b *testing.B, dir, path string, i int, fsys eventlog.FS, dryRun bool) time.Duration {
	b.Helper()
	state := filepath.Join(dir, "state-"+strconv.Itoa(i))
	e := New(Options{StateDir: state, Workdir: dir, Progress: ProgressQuiet, FS: fsys, Stdout: io.Discard, Stderr: io.Discard})
	began := time.Now()
	err := e.Run(b.Context(), path, RunOptions{TaskID: "bench", DryRun: dryRun})
	took := time.Since(began)
	if err != nil {
		b.Fatalf("Run: %v", err)
	}
	b.StopTimer()
	os.RemoveAll(state)
	b.StartTimer()
	return took
}

func writePipeline(b *testing.B, yaml string) (dir, path string) {
	b.Helper()
	dir = b.TempDir()
	path = filepath.Join(dir, "pipeline.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		b.Fatal(err)
	}
	return dir, path
}

// BenchmarkChain runs a chain of `true` shell steps through the engine and,
// in the same iteration, the same commands from a plain loop
// (exec.Command("/bin/sh", "-c", "true").Run()). ratio is engine / loop.
func BenchmarkChain(b *testing.B) {
	const steps = 100
	for _, c := range []struct {
		name, durability string
		fsys             eventlog.FS
	}{
		{pipeline.DurabilityAlways, pipeline.DurabilityAlways, nil},
		{pipeline.DurabilityBatch, pipeline.DurabilityBatch, nil},
		{"no-fsync", pipeline.DurabilityAlways, noSyncFS{}}, // not durable: the engine's cost beyond its fsyncs
	} {
		b.Run(c.name, func(b *testing.B) {
			dir, path := writePipeline(b, pipelineYAML(steps, "chain", c.durability, 1, bodyTrue))
			var engine, loop time.Duration
			for i := 0; b.Loop(); i++ {
				engine += benchRun(b, dir, path, i, c.fsys, false)
				began := time.Now()
				for range steps {
					if err := exec.Command("/bin/sh", "-c", "true").Run(); err != nil {
						b.Fatal(err)
					}
				}
				loop += time.Since(began)
			}
			perStep := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(b.N*steps) }
			b.ReportMetric(perStep(engine), "µs/step")
			b.ReportMetric(perStep(loop), "loop-µs/step")
			b.ReportMetric(float64(engine)/float64(loop), "ratio")
		})
	}
}

// BenchmarkLuaStep runs a chain of no-op Lua steps end to end (each with
// its durable STEP_START), in the worker processes Lua steps run in by
// default, and, in the same iteration, the baselines it is judged against,
// per step:
//   - inprocess-µs/step: the same chain with isolation: inprocess, every
//     state in the runner (the design before the workers); pool-ratio is
//     µs/step over it, what the workers cost;
//   - bare-state-µs: create and close a gopher-lua state with its default
//     libraries (lua.NewState), the least a fresh state per step costs;
//     ratio is µs/step over it;
//   - fsync-µs: one O_APPEND write and fdatasync of a log line in the same
//     folder, the floor of a durable STEP_START; fsync-ratio is µs/step over
//     it;
//   - lua-µs: the Lua executor alone (a job to a worker: fresh sandboxed
//     state, run, encoded result) on the same steps, without the engine or
//     the log, and inprocess-lua-µs the same in the runner; lua-ratio is
//     lua-µs over bare-state-µs, lua-pool-ratio lua-µs over
//     inprocess-lua-µs;
//   - the floor of a step in another process, with no apollo code on
//     either side: child-start-ms, a child of this binary started until its
//     main runs (pipeEcho), and pipe-trip-µs, one round trip over its pipes
//     of a job-sized frame and a small answer; floor-µs/step is
//     inprocess-µs/step plus one round trip plus the start's share of the
//     chain, floor-ratio µs/step over it.
//
// Each engine run starts its own workers, as each apollo invocation does.
// The no-fsync case runs the engine on a file system whose fsyncs do
// nothing: what a step costs beyond its fsyncs (not durable).
func BenchmarkLuaStep(b *testing.B) {
	const steps = 200
	for _, c := range []struct {
		name, durability string
		fsys             eventlog.FS
	}{
		{pipeline.DurabilityAlways, pipeline.DurabilityAlways, nil},
		{pipeline.DurabilityBatch, pipeline.DurabilityBatch, nil},
		{"no-fsync", pipeline.DurabilityAlways, noSyncFS{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			dir, path := writePipeline(b, pipelineYAML(steps, "chain", c.durability, 1, bodyNoop))
			inPath := filepath.Join(dir, "inprocess.yaml")
			if err := os.WriteFile(inPath, []byte(pipelineYAML(steps, "chain", c.durability, 1, bodyNoop+"\n    isolation: inprocess")), 0o644); err != nil {
				b.Fatal(err)
			}
			p, err := pipeline.Load(path, pipeline.LoadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			inP, err := pipeline.Load(inPath, pipeline.LoadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			raw, err := os.OpenFile(filepath.Join(dir, "fsync.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				b.Fatal(err)
			}
			defer raw.Close()
			line := []byte(`{"seq":2,"ts":"2026-01-02T03:04:05.678Z","task_id":"bench","event_type":"STEP_START","step_id":"s1","status":"RUNNING","retry_count":0,"input_digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}` + "\n")
			luaOnly := func(p *pipeline.Pipeline) time.Duration {
				x := &executor.Lua{Workdir: dir}
				began := time.Now()
				for _, s := range p.Steps {
					a := &executor.Attempt{TaskID: "bench", StepID: s.ID, Step: s, Pipeline: p, Dir: dir,
						OutputPath: filepath.Join(dir, "out-"+s.ID+".log"), Started: func(int) error { return nil },
						Vars: map[string]string{"step_id": s.ID}, ArtifactsDir: dir, StateDir: dir}
					if res := x.Run(b.Context(), a); res.Err != nil {
						b.Fatalf("step %s: %v", s.ID, res.Err)
					}
				}
				return time.Since(began)
			}
			var engine, inproc, bare, fsync, luaPool, luaIn, childStart, trips time.Duration
			for i := 0; b.Loop(); i++ {
				// The order rotates, so that neither side always runs on a
				// machine the other just warmed (or loaded).
				if i%2 == 0 {
					engine += benchRun(b, dir, path, 2*i, c.fsys, false)
					inproc += benchRun(b, dir, inPath, 2*i+1, c.fsys, false)
				} else {
					inproc += benchRun(b, dir, inPath, 2*i+1, c.fsys, false)
					engine += benchRun(b, dir, path, 2*i, c.fsys, false)
				}

				began := time.Now()
				for range steps {
					L := lua.NewState()
					L.Close()
				}
				bare += time.Since(began)

				began = time.Now()
				for range steps {
					if _, err := raw.Write(line); err != nil {
						b.Fatal(err)
					}
					if err := datasync(raw); err != nil {
						b.Fatal(err)
					}
				}
				fsync += time.Since(began)

				if i%2 == 0 {
					luaPool += luaOnly(p)
					luaIn += luaOnly(inP)
				} else {
					luaIn += luaOnly(inP)
					luaPool += luaOnly(p)
				}

				st, tr := processFloor(b, steps, luaJobSize)
				childStart += st
				trips += tr
			}
			perStep := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 / float64(b.N*steps) }
			b.ReportMetric(perStep(engine), "µs/step")
			b.ReportMetric(perStep(inproc), "inprocess-µs/step")
			b.ReportMetric(float64(engine)/float64(inproc), "pool-ratio")
			b.ReportMetric(perStep(bare), "bare-state-µs")
			b.ReportMetric(float64(engine)/float64(bare), "ratio")
			b.ReportMetric(perStep(fsync), "fsync-µs")
			b.ReportMetric(float64(engine)/float64(fsync), "fsync-ratio")
			b.ReportMetric(perStep(luaPool), "lua-µs")
			b.ReportMetric(perStep(luaIn), "inprocess-lua-µs")
			b.ReportMetric(float64(luaPool)/float64(bare), "lua-ratio")
			b.ReportMetric(float64(luaPool)/float64(luaIn), "lua-pool-ratio")
			// The floor of a step in another process: the in-process step,
			// plus its share of one child's start and one bare round trip.
			floor := inproc + childStart + trips
			b.ReportMetric(float64(childStart.Microseconds())/1000/float64(b.N), "child-start-ms")
			b.ReportMetric(perStep(trips), "pipe-trip-µs")
			b.ReportMetric(perStep(floor), "floor-µs/step")
			b.ReportMetric(float64(engine)/float64(floor), "floor-ratio")
		})
	}
}

// BenchmarkGroupCommit runs 1,000 independent no-op steps at parallelism 8
// with durability always and counts the log's fsyncs: without group commit
// there would be two a step (STEP_START and STEP_END).
func BenchmarkGroupCommit(b *testing.B) {
	const steps = 1000
	for _, kind := range []struct{ name, body string }{{"shell", bodyTrue}, {"lua", bodyNoop}} {
		b.Run(kind.name, func(b *testing.B) {
			dir, path := writePipeline(b, pipelineYAML(steps, "flat", pipeline.DurabilityAlways, 8, kind.body))
			var syncs atomic.Int64
			var took time.Duration
			for i := 0; b.Loop(); i++ {
				took += benchRun(b, dir, path, i, countFS{syncs: &syncs}, false)
			}
			b.ReportMetric(float64(syncs.Load())/float64(b.N*steps), "fsyncs/step")
			b.ReportMetric(float64(took.Microseconds())/float64(b.N*steps), "µs/step")
		})
	}
}

var dagSizes = []int{1_000, 10_000, 100_000}

// runSizes keep BenchmarkRunDAG quick; BenchmarkRun100k (scale_test.go)
// runs 1k to 100k steps.
var runSizes = []int{1_000, 2_000, 5_000}

// BenchmarkPlanDAG loads, validates, renders and plans (apollo run
// --dry-run) DAGs of 1k, 10k and 100k steps: linear means ns/step stays
// flat. In the same iteration it decodes the same file with yaml.v3 into a
// yaml.Node, the least any loader built on yaml.v3 can do: yaml-ms is that,
// ratio is ms/plan over it. cpu-ratio is the same in CPU time (user+system,
// every thread, the garbage collector's included), which a machine busy
// with other work disturbs less than wall time.
func BenchmarkPlanDAG(b *testing.B) {
	for _, shape := range []string{"wide", "chain"} {
		for _, n := range dagSizes {
			b.Run(fmt.Sprintf("%s/%d", shape, n), func(b *testing.B) {
				dir, path := writePipeline(b, pipelineYAML(n, shape, pipeline.DurabilityBatch, 8, bodyNoop))
				src, err := os.ReadFile(path)
				if err != nil {
					b.Fatal(err)
				}
				peak := watchMemory()
				var took, decode, cpuPlan, cpuDecode time.Duration
				for i := 0; b.Loop(); i++ {
					c0 := cpuTime(b)
					took += benchRun(b, dir, path, i, nil, true)
					c1 := cpuTime(b)
					began := time.Now()
					var doc yaml.Node
					if err := yaml.Unmarshal(src, &doc); err != nil {
						b.Fatal(err)
					}
					decode += time.Since(began)
					cpuPlan, cpuDecode = cpuPlan+c1-c0, cpuDecode+cpuTime(b)-c1
				}
				b.ReportMetric(float64(peak())/(1<<20), "peak-heap-MB")
				b.ReportMetric(float64(took.Nanoseconds())/float64(b.N*n), "ns/step")
				b.ReportMetric(float64(took.Nanoseconds())/1e6/float64(b.N), "ms/plan")
				b.ReportMetric(float64(decode.Nanoseconds())/1e6/float64(b.N), "yaml-ms")
				b.ReportMetric(float64(took)/float64(decode), "ratio")
				b.ReportMetric(float64(cpuPlan)/float64(cpuDecode), "cpu-ratio")
			})
		}
	}
}

// cpuTime is the CPU time the process has used so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRunDAG runs DAGs of 1k, 2k and 5k no-op Lua steps end to end
// (durability batch, parallelism 8) and reports the time per step and the
// peak memory of the Go runtime during the run.
func BenchmarkRunDAG(b *testing.B) {
	for _, shape := range []string{"wide", "chain"} {
		for _, n := range runSizes {
			b.Run(fmt.Sprintf("%s/%d", shape, n), func(b *testing.B) {
				dir, path := writePipeline(b, pipelineYAML(n, shape, pipeline.DurabilityBatch, 8, bodyNoop))
				var syncs atomic.Int64
				peak := watchMemory()
				var took time.Duration
				for i := 0; b.Loop(); i++ {
					took += benchRun(b, dir, path, i, countFS{syncs: &syncs}, false)
				}
				b.ReportMetric(float64(took.Nanoseconds())/float64(b.N*n), "ns/step")
				b.ReportMetric(float64(syncs.Load())/float64(b.N*n), "fsyncs/step")
				b.ReportMetric(float64(peak())/(1<<20), "peak-heap-MB")
			})
		}
	}
}

// watchMemory samples the heap (live and not yet swept objects) until the
// returned function is called, which reports the peak. The runtime's total
// mapped memory would count what earlier benchmarks of the process left.
func watchMemory() func() uint64 {
	peak := watchPeak()
	return func() uint64 {
		heap, _ := peak()
		return heap
	}
}

// BenchmarkLuaWorker runs no-op Lua attempts through the Lua executor
// alone, without the engine or the log, one attempt per iteration: in a Lua
// process of the executor's pool (process) or in this process (inprocess).
// It is what `perf stat` and `strace -c` count per attempt
// (docs/performance.md): each sub-benchmark runs alone with -bench.
func BenchmarkLuaWorker(b *testing.B) {
	const steps = 200
	for _, iso := range []string{"process", "inprocess"} {
		b.Run(iso, func(b *testing.B) {
			body := bodyNoop
			if iso == "inprocess" {
				body += "\n    isolation: inprocess"
			}
			dir, path := writePipeline(b, pipelineYAML(steps, "chain", pipeline.DurabilityAlways, 1, body))
			p, err := pipeline.Load(path, pipeline.LoadOptions{})
			if err != nil {
				b.Fatal(err)
			}
			x := &executor.Lua{Workdir: dir}
			for i := 0; b.Loop(); i++ {
				s := p.Steps[i%steps]
				a := &executor.Attempt{TaskID: "bench", StepID: s.ID, Step: s, Pipeline: p, Dir: dir,
					OutputPath: filepath.Join(dir, "out-"+s.ID+".log"), Started: func(int) error { return nil },
					Vars: map[string]string{"step_id": s.ID}, ArtifactsDir: dir, StateDir: dir}
				if res := x.Run(b.Context(), a); res.Err != nil {
					b.Fatalf("step %s: %v", s.ID, res.Err)
				}
			}
		})
	}
}

// BenchmarkLuaChain runs the chain of 200 no-op Lua steps of
// BenchmarkLuaStep (durability always) through the engine, one run per
// iteration, in Lua processes (process) or with isolation: inprocess
// (inprocess): what `perf stat` and `strace -c` count per step
// (docs/performance.md), each sub-benchmark alone with -bench.
func BenchmarkLuaChain(b *testing.B) {
	const steps = 200
	for _, iso := range []string{"process", "inprocess"} {
		b.Run(iso, func(b *testing.B) {
			body := bodyNoop
			if iso == "inprocess" {
				body += "\n    isolation: inprocess"
			}
			dir, path := writePipeline(b, pipelineYAML(steps, "chain", pipeline.DurabilityAlways, 1, body))
			var took time.Duration
			for i := 0; b.Loop(); i++ {
				took += benchRun(b, dir, path, i, nil, false)
			}
			b.ReportMetric(float64(took.Nanoseconds())/1000/float64(b.N*steps), "µs/step")
		})
	}
}

// pipeEchoCommand makes the test binary the bare child of processFloor
// (TestMain): it answers every frame its parent sends with a small one.
const pipeEchoCommand = "__bench-pipe-echo"

// pipeEcho is that child: one byte once it runs, then for each frame read
// from in (a 4-byte big-endian length, then as many bytes) a frame of
// pipeEchoAnswer bytes on out, until in ends. It returns the exit code.
func pipeEcho(in io.Reader, out io.Writer) int {
	if _, err := out.Write([]byte{'H'}); err != nil {
		return 1
	}
	runtime.GOMAXPROCS(1) // as a Lua process (luaproc.Serve)
	r := bufio.NewReader(in)
	answer := make([]byte, 4+pipeEchoAnswer)
	binary.BigEndian.PutUint32(answer, pipeEchoAnswer)
	var head [4]byte
	for {
		if _, err := io.ReadFull(r, head[:]); err != nil {
			return 0
		}
		if _, err := r.Discard(int(binary.BigEndian.Uint32(head[:]))); err != nil {
			return 1
		}
		if _, err := out.Write(answer); err != nil {
			return 1
		}
	}
}

// luaJobSize is the size of the job a no-op Lua step of a chain sends its
// Lua process (engine/executor's isolatedJob, JSON).
const luaJobSize = 660

// pipeEchoAnswer is the size of pipeEcho's answer, about a no-op Lua
// step's result.
const pipeEchoAnswer = 120

// processFloor measures, with no apollo code on either side, what running
// steps jobs in another process costs at the least: starting a child of
// this binary (the one the Lua processes are) until it runs its first line
// of main, and then steps round trips over its pipes, each a frame of
// jobSize bytes to the child and a small one back, as a Lua step's job and
// result. It returns the start and the round trips' total.
func processFloor(b *testing.B, steps, jobSize int) (start, trips time.Duration) {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, pipeEchoCommand)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	buf := make([]byte, 4+pipeEchoAnswer)
	if _, err := io.ReadFull(stdout, buf[:1]); err != nil {
		b.Fatalf("the echo child did not start: %v", err)
	}
	start = time.Since(began)
	job := make([]byte, 4+jobSize)
	binary.BigEndian.PutUint32(job, uint32(jobSize))
	began = time.Now()
	for range steps {
		if _, err := stdin.Write(job); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(stdout, buf); err != nil {
			b.Fatal(err)
		}
	}
	return start, time.Since(began)
}
