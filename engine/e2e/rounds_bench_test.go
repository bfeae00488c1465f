package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// contender is one tool timed in a round: cmd builds its command for
// round i (a fresh state folder each round, for apollo).
type contender struct {
	name string
	cmd  func(i int) *exec.Cmd
}

// medians are a contender's median wall and CPU time over the rounds.
type medians struct{ wall, cpu time.Duration }

// rounds runs every contender once per benchmark iteration, the order
// rotated by one each round so that no tool always runs first on a cold
// cache or last on a hot one, and reports each tool's median time per unit
// (units per command: steps, or 1 for a whole run) and its median over the
// first contender's, the baseline, measured in the same run; and the same
// for the CPU time of each command's whole process tree (user+system, its
// waited-for children included), which a machine busy with other work
// disturbs less than wall time. after, when set, runs untimed at the end of
// each round. It returns each contender's medians, by name.
func rounds(b *testing.B, dir string, units int, unit string, cs []contender, after func(i int)) map[string]medians {
	b.Helper()
	took := make([][]time.Duration, len(cs))
	cpu := make([][]time.Duration, len(cs))
	for i := 0; b.Loop(); i++ {
		for k := range cs {
			j := (i + k) % len(cs)
			cmd := cs[j].cmd(i)
			cmd.Dir = dir
			began := time.Now()
			out, err := cmd.CombinedOutput()
			took[j] = append(took[j], time.Since(began))
			if err != nil {
				b.Fatalf("%s: %v\n%s", cs[j].name, err, out)
			}
			cpu[j] = append(cpu[j], cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
		}
		if after != nil {
			b.StopTimer()
			after(i)
			b.StartTimer()
		}
	}
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	base, cpuBase := median(took[0]), median(cpu[0])
	got := make(map[string]medians, len(cs))
	for j, c := range cs {
		m, mc := median(took[j]), median(cpu[j])
		got[c.name] = medians{m, mc}
		b.ReportMetric(float64(m.Nanoseconds())/1000/float64(units), c.name+"-µs/"+unit)
		b.ReportMetric(float64(mc.Nanoseconds())/1000/float64(units), c.name+"-cpu-µs/"+unit)
		if j > 0 {
			b.ReportMetric(float64(m)/float64(base), c.name+"/"+cs[0].name)
			b.ReportMetric(float64(mc)/float64(cpuBase), c.name+"/"+cs[0].name+"-cpu")
		}
	}
	return got
}

// BenchmarkWide runs 1,000 independent `true` steps at parallelism 8
// through the real apollo binary (durability always, a fresh state folder
// each round) and, in the same rounds, through `make -j8` (phony targets,
// the baseline) and `xargs -P8`. Every tool starts one process per step,
// apollo's a /bin/sh; make runs `true` without a shell. The floor is a Go
// program that does only what no Go orchestrator can skip: start `/bin/sh
// -c true` in its own process group for every step, eight at a time, and
// wait for it (spawnLoop, this test binary run again); apollo's ratio to it
// is reported as apollo/go-sh. go-true, the same loop starting /bin/true
// as make does, splits the floor's distance from make into Go's process
// start and the shell's. Medians over the rounds (-benchtime Nx sets
// how many), the order rotated. With
// APOLLO_BENCH_OTHER naming another apollo binary (an earlier build), it
// runs in the same rounds as apollo-other: a before and after.
func BenchmarkWide(b *testing.B) {
	makePath, err := exec.LookPath("make")
	if err != nil {
		b.Skip("make is not installed")
	}
	const steps = 1000
	bin := binary(b)
	dir := b.TempDir()
	var mk strings.Builder
	mk.WriteString(".PHONY: all")
	for i := range steps {
		fmt.Fprintf(&mk, " s%d", i)
	}
	mk.WriteString("\nall:")
	for i := range steps {
		fmt.Fprintf(&mk, " s%d", i)
	}
	mk.WriteString("\n")
	for i := range steps {
		fmt.Fprintf(&mk, "s%d:\n\ttrue\n", i)
	}
	var pl strings.Builder
	pl.WriteString("task_name: wide\nparallelism: 8\ndurability: always\nsteps:\n")
	for i := range steps {
		fmt.Fprintf(&pl, "  - id: s%d\n    command: \"true\"\n", i)
	}
	makefile := writeFile(b, dir, "Makefile", mk.String())
	pipeline := writeFile(b, dir, "wide.yaml", pl.String())
	state := func(i int) string { return filepath.Join(dir, "state-"+strconv.Itoa(i)) }
	cs := []contender{
		{"make-j8", func(int) *exec.Cmd { return exec.Command(makePath, "-s", "-j8", "-f", makefile, "all") }},
		{"apollo", func(i int) *exec.Cmd { return exec.Command(bin, "run", pipeline, "--state-dir", state(i)) }},
		{"xargs-P8", func(int) *exec.Cmd {
			return exec.Command("/bin/sh", "-c", "seq "+strconv.Itoa(steps)+" | xargs -P8 -n1 sh -c true")
		}},
		{"go-sh", spawnLoopCmd(steps, 8, "/bin/sh -c true")},
		{"go-true", spawnLoopCmd(steps, 8, "/bin/true")},
	}
	if other := os.Getenv("APOLLO_BENCH_OTHER"); other != "" {
		cs = append(cs, contender{"apollo-other", func(i int) *exec.Cmd {
			return exec.Command(other, "run", pipeline, "--state-dir", state(i)+"-other")
		}})
	}
	got := rounds(b, dir, steps, "step", cs, func(i int) { os.RemoveAll(state(i)); os.RemoveAll(state(i) + "-other") })
	floor, apollo := got["go-sh"], got["apollo"]
	b.ReportMetric(float64(apollo.wall)/float64(floor.wall), "apollo/go-sh")
	b.ReportMetric(float64(apollo.cpu)/float64(floor.cpu), "apollo/go-sh-cpu")
}

// spawnLoopEnv, set to "STEPS,PARALLELISM,COMMAND", makes the test binary
// a floor contender of BenchmarkWide instead of running tests.
const spawnLoopEnv = "APOLLO_BENCH_SPAWN_LOOP"

// spawnLoopCmd is the contender that runs command (its words split at
// spaces) steps times, parallelism at a time (spawnLoop).
func spawnLoopCmd(steps, parallelism int, command string) func(int) *exec.Cmd {
	return func(int) *exec.Cmd {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d,%d,%s", spawnLoopEnv, steps, parallelism, command))
		return cmd
	}
}

// spawnLoop starts COMMAND STEPS times, PARALLELISM at a time, each in its
// own process group as apollo starts a step's shell, and waits for each; it
// returns the process's exit code.
func spawnLoop(spec string) int {
	fields := append(strings.SplitN(spec, ",", 3), "", "")[:3] // missing fields are empty
	n, err1 := strconv.Atoi(fields[0])
	p, err2 := strconv.Atoi(fields[1])
	argv := strings.Fields(fields[2])
	if err1 != nil || err2 != nil || n < 1 || p < 1 || len(argv) == 0 {
		fmt.Fprintf(os.Stderr, "%s=%q: want STEPS,PARALLELISM,COMMAND\n", spawnLoopEnv, spec)
		return 2
	}
	next := make(chan struct{})
	failed := make(chan error, p)
	var wg sync.WaitGroup
	for range p {
		wg.Go(func() {
			for range next {
				cmd := exec.Command(argv[0], argv[1:]...)
				cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
				if err := cmd.Run(); err != nil {
					failed <- err
					return
				}
			}
		})
	}
	code := 0
	for range n {
		select {
		case next <- struct{}{}:
			continue
		case err := <-failed:
			fmt.Fprintln(os.Stderr, fields[2]+":", err)
			code = 1
		}
		break
	}
	close(next)
	wg.Wait()
	return code
}

// BenchmarkStartup times what a small run costs before and around its one
// step: make on a 1-rule Makefile (the baseline), `apollo run` on a 1-step
// pipeline (a fresh state folder each round, so the step runs and its
// STEP_START is fsynced), and `apollo --help` and `apollo version`, which
// run nothing but the binary's start; and libraries, a program that links
// every package apollo's own packages import and returns at once
// (librariesOnly): the floor of apollo's start that only linking less
// would lower. It reports apollo-help/libraries, how far apollo's start is
// above that floor, and libraries/make. Medians over the rounds, the order
// rotated. APOLLO_BENCH_OTHER adds another build's run and --help, as in
// BenchmarkWide.
func BenchmarkStartup(b *testing.B) {
	makePath, err := exec.LookPath("make")
	if err != nil {
		b.Skip("make is not installed")
	}
	bin := binary(b)
	libraries, _ := librariesOnly(b)
	dir := b.TempDir()
	makefile := writeFile(b, dir, "Makefile", "all:\n\ttrue\n")
	pipeline := writeFile(b, dir, "one.yaml", "task_name: one\nsteps:\n  - id: a\n    command: \"true\"\n")
	state := func(i int) string { return filepath.Join(dir, "state-"+strconv.Itoa(i)) }
	cs := []contender{
		{"make", func(int) *exec.Cmd { return exec.Command(makePath, "-s", "-f", makefile, "all") }},
		{"apollo-run", func(i int) *exec.Cmd { return exec.Command(bin, "run", pipeline, "--state-dir", state(i)) }},
		{"apollo-help", func(int) *exec.Cmd { return exec.Command(bin, "--help") }},
		{"apollo-version", func(int) *exec.Cmd { return exec.Command(bin, "version") }},
		{"libraries", func(int) *exec.Cmd { return exec.Command(libraries) }},
	}
	if other := os.Getenv("APOLLO_BENCH_OTHER"); other != "" {
		cs = append(cs,
			contender{"other-run", func(i int) *exec.Cmd {
				return exec.Command(other, "run", pipeline, "--state-dir", state(i)+"-other")
			}},
			contender{"other-help", func(int) *exec.Cmd { return exec.Command(other, "--help") }})
	}
	got := rounds(b, dir, 1, "run", cs, func(i int) { os.RemoveAll(state(i)); os.RemoveAll(state(i) + "-other") })
	floor, help := got["libraries"], got["apollo-help"]
	b.ReportMetric(float64(help.wall)/float64(floor.wall), "apollo-help/libraries")
	b.ReportMetric(float64(help.cpu)/float64(floor.cpu), "apollo-help/libraries-cpu")
}

// writeFile writes text to dir/name and returns its path.
func writeFile(b *testing.B, dir, name, text string) string {
	b.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}
