package e2e_test

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkRunMemory runs 1,000 `true` steps through the real apollo binary
// (`apollo run`, durability always, a fresh state folder each time), as a
// chain and as a wide DAG at parallelism 8, and samples the process's
// /proc/PID/smaps_rollup every millisecond. At the sample of the largest
// resident set it reports: rss-MB, the whole resident set; anon-MB, its
// private anonymous memory (the Go heap, stacks and the runtime's own
// structures); file-MB, the rest: pages of the mapped binary and of the
// C libraries, read from the page cache and shared with every other
// process mapping the same files. Linux only.
func BenchmarkRunMemory(b *testing.B) {
	if _, err := os.Stat("/proc/self/smaps_rollup"); err != nil {
		b.Skip("no /proc/self/smaps_rollup")
	}
	const steps = 1000
	for _, shape := range []string{"chain", "wide"} {
		b.Run(shape, func(b *testing.B) {
			bin := binary(b)
			dir := b.TempDir()
			var pl strings.Builder
			pl.WriteString("task_name: mem\nparallelism: 8\ndurability: always\nsteps:\n")
			for i := range steps {
				fmt.Fprintf(&pl, "  - id: s%d\n    command: \"true\"\n", i)
				if shape == "chain" && i > 0 {
					fmt.Fprintf(&pl, "    depends_on: [s%d]\n", i-1)
				}
			}
			pipeline := writeFile(b, dir, "p.yaml", pl.String())
			var peak rollup
			for i := 0; b.Loop(); i++ {
				state := filepath.Join(dir, "state-"+strconv.Itoa(i))
				cmd := exec.Command(bin, "run", pipeline, "--state-dir", state)
				cmd.Dir = dir
				var out bytes.Buffer
				cmd.Stdout, cmd.Stderr = &out, &out
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				path := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/smaps_rollup"
			sample:
				for {
					if r, ok := readRollup(path); ok && r.rss > peak.rss {
						peak = r
					}
					select {
					case err := <-done:
						if err != nil {
							b.Fatalf("apollo run: %v\n%s", err, out.Bytes())
						}
						break sample
					case <-time.After(time.Millisecond):
					}
				}
				b.StopTimer()
				os.RemoveAll(state)
				b.StartTimer()
			}
			b.ReportMetric(float64(peak.rss)/1024, "rss-MB")
			b.ReportMetric(float64(peak.anon)/1024, "anon-MB")
			b.ReportMetric(float64(peak.rss-peak.anon)/1024, "file-MB")
		})
	}
}

// rollup is what a smaps_rollup says, in kB.
type rollup struct{ rss, anon int }

func readRollup(path string) (rollup, bool) {
	f, err := os.Open(path)
	if err != nil {
		return rollup{}, false
	}
	defer f.Close()
	var r rollup
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
		switch k {
		case "Rss":
			r.rss = n
		case "Anonymous":
			r.anon = n
		}
	}
	return r, r.rss > 0
}
