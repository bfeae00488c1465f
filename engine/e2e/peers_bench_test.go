package e2e_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkPeers runs one chain of trivial steps, each depending on the one
// before, through the real apollo binary and through what users would run
// instead, all in the same iteration, and reports each as µs per step and
// as a ratio to the bare shell loop (a /bin/sh loop running `sh -c` with
// the step's command, the floor the performance issue measures every tool
// against). The step is `true`, as a user writes it, and `/bin/true`, a
// program every tool must start: go-task runs its commands in a shell
// interpreter inside its own process, where `true` is a builtin and starts
// no process at all, while apollo and make start one for every step. The
// tools:
//   - apollo with durability always and batch (a fresh state folder each
//     time, so every step runs and every STEP_START is fsynced);
//   - GNU make, phony targets each depending on the one before (no state);
//   - go-task, tasks chained by deps (no durable state), when a `task`
//     binary is on PATH or named by APOLLO_BENCH_TASK; docs/performance.md
//     says how to install it beside the project.
//
// A tool that is not installed is left out of the figures with a log line.
// Each tool's process start and apollo's per-run costs (lock, log creation,
// final snapshot) are inside its figure, as a user would time it: the
// longer chain spreads them thinner.
func BenchmarkPeers(b *testing.B) {
	for _, steps := range []int{100, 1000} {
		for _, body := range []struct{ name, command string }{{"true", "true"}, {"bin-true", "/bin/true"}} {
			b.Run(strconv.Itoa(steps)+"/"+body.name, func(b *testing.B) { benchPeers(b, steps, body.command) })
		}
	}
}

func benchPeers(b *testing.B, steps int, command string) {
	bin := binary(b)
	dir := b.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
		return path
	}
	makefile := write("Makefile", chainMakefile(steps, command))
	taskfile := write("Taskfile.yml", chainTaskfile(steps, command))
	last := "s" + strconv.Itoa(steps-1)
	durabilities := []string{"always", "batch"}
	// stateDir is the fresh state folder of iteration i's apollo run.
	stateDir := func(durability string, i int) string {
		return filepath.Join(dir, "state-"+durability+"-"+strconv.Itoa(i))
	}

	type peer struct {
		name string
		cmd  func(i int) *exec.Cmd
	}
	peers := []peer{
		{"sh-loop", func(int) *exec.Cmd {
			return exec.Command("/bin/sh", "-c",
				`i=0; while [ $i -lt `+strconv.Itoa(steps)+` ]; do sh -c "$0"; i=$((i+1)); done`, command)
		}},
	}
	for _, durability := range durabilities {
		pipeline := write("chain-"+durability+".yaml", chainPipeline(steps, durability, command))
		peers = append(peers, peer{"apollo-" + durability, func(i int) *exec.Cmd {
			return exec.Command(bin, "run", pipeline, "--state-dir", stateDir(durability, i))
		}})
	}
	if path, err := exec.LookPath("make"); err == nil {
		peers = append(peers, peer{"make", func(int) *exec.Cmd { return exec.Command(path, "-s", "-f", makefile, last) }})
	} else {
		b.Logf("make is not installed: left out")
	}
	task := os.Getenv("APOLLO_BENCH_TASK")
	if task == "" {
		task, _ = exec.LookPath("task")
	}
	if task != "" {
		peers = append(peers, peer{"go-task", func(int) *exec.Cmd { return exec.Command(task, "-s", "-t", taskfile, last) }})
	} else {
		b.Logf("go-task is not installed (no task on PATH, APOLLO_BENCH_TASK unset): left out")
	}

	took := make([]time.Duration, len(peers))
	for i := 0; b.Loop(); i++ {
		for j, p := range peers {
			cmd := p.cmd(i)
			cmd.Dir = dir
			began := time.Now()
			out, err := cmd.CombinedOutput()
			took[j] += time.Since(began)
			if err != nil {
				b.Fatalf("%s: %v\n%s", p.name, err, out)
			}
		}
		b.StopTimer()
		for _, durability := range durabilities {
			os.RemoveAll(stateDir(durability, i))
		}
		b.StartTimer()
	}
	for j, p := range peers {
		b.ReportMetric(float64(took[j].Nanoseconds())/1000/float64(b.N*steps), p.name+"-µs/step")
		if j > 0 {
			b.ReportMetric(float64(took[j])/float64(took[0]), p.name+"-ratio")
		}
	}
}

// chainPipeline is an apollo pipeline of n steps running command, each
// depending on the one before.
func chainPipeline(n int, durability, command string) string {
	var s strings.Builder
	fmt.Fprintf(&s, "task_name: chain\ndurability: %s\nsteps:\n", durability)
	for i := range n {
		fmt.Fprintf(&s, "  - id: s%d\n    command: %q\n", i, command)
		if i > 0 {
			fmt.Fprintf(&s, "    depends_on: [s%d]\n", i-1)
		}
	}
	return s.String()
}

// chainMakefile is the same chain as phony make targets.
func chainMakefile(n int, command string) string {
	var s strings.Builder
	s.WriteString(".PHONY:")
	for i := range n {
		fmt.Fprintf(&s, " s%d", i)
	}
	s.WriteString("\n")
	for i := range n {
		fmt.Fprintf(&s, "s%d:", i)
		if i > 0 {
			fmt.Fprintf(&s, " s%d", i-1)
		}
		fmt.Fprintf(&s, "\n\t%s\n", command)
	}
	return s.String()
}

// chainTaskfile is the same chain as go-task tasks.
func chainTaskfile(n int, command string) string {
	var s strings.Builder
	s.WriteString("version: '3'\ntasks:\n")
	for i := range n {
		fmt.Fprintf(&s, "  s%d:\n    cmds: [%q]\n", i, command)
		if i > 0 {
			fmt.Fprintf(&s, "    deps: [s%d]\n", i-1)
		}
	}
	return s.String()
}
