package history_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"apollo/engine"
	"apollo/engine/history"
	"apollo/engine/internal/golden"
	"apollo/engine/statedir"
	"apollo/engine/usage"
	"apollo/eventlog"
)

const graphPipeline = "testdata/graph/pipeline.yaml"

// graphTask writes a log for task "g" in which the steps of
// testdata/graph/pipeline.yaml are in every state, and returns the state
// directory.
func graphTask(t *testing.T) string {
	t.Helper()
	state := t.TempDir()
	writeLog(t, state, "g", testEpoch.Unix(), testClock(testEpoch),
		startRec("fetch", "validate", "transform", "stats", "publish", "end"),
		stepRec(eventlog.StepStart, "fetch", eventlog.Running, 0),
		stepRec(eventlog.StepEnd, "fetch", eventlog.Success, 0),
		stepRec(eventlog.StepStart, "validate", eventlog.Running, 0),
		stepRec(eventlog.StepEnd, "validate", eventlog.Success, 0),
		stepRec(eventlog.StepStart, "stats", eventlog.Running, 0),
		stepRec(eventlog.StepEnd, "stats", eventlog.Failed, 0),
		stepRec(eventlog.StepEnd, "end", eventlog.Skipped, 0),
		stepRec(eventlog.StepStart, "transform", eventlog.Running, 0))
	return state
}

func graphOf(t *testing.T, state string, o history.GraphOptions) *history.Graph {
	t.Helper()
	g, err := runsOf(engine.Options{StateDir: state}).Graph(graphPipeline, o)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func graphStatesOf(g *history.Graph) string {
	var s []string
	for _, n := range g.Nodes {
		s = append(s, n.ID+"="+n.State)
	}
	return strings.Join(s, " ")
}

// TestGraphStates checks the state each step is drawn in, with and
// without a runner holding the task.
func TestGraphStates(t *testing.T) {
	state := graphTask(t)
	if got, want := graphStatesOf(graphOf(t, state, history.GraphOptions{})), "fetch= validate= transform= stats= publish= end="; got != want {
		t.Errorf("no task: states %q, want %q", got, want)
	}
	got := graphStatesOf(graphOf(t, state, history.GraphOptions{TaskID: "g"}))
	if want := "fetch=SUCCESS validate=SUCCESS transform=dirty stats=FAILED publish=PENDING end=SKIPPED"; got != want {
		t.Errorf("cut-off task: states %q, want %q", got, want)
	}
	lock, err := eventlog.LockTask(statedir.Dir{Root: state}.Lock("g"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Unlock()
	got = graphStatesOf(graphOf(t, state, history.GraphOptions{TaskID: "g"}))
	if want := "fetch=SUCCESS validate=SUCCESS transform=RUNNING stats=FAILED publish=PENDING end=SKIPPED"; got != want {
		t.Errorf("running task: states %q, want %q", got, want)
	}
	if got := graphStatesOf(graphOf(t, state, history.GraphOptions{TaskID: "never_ran"})); !strings.Contains(got, "fetch=PENDING") {
		t.Errorf("task without a log: states %q, want all PENDING", got)
	}
}

// TestGraphDOT checks the DOT output against its golden file.
func TestGraphDOT(t *testing.T) {
	for _, tt := range []struct{ name, task string }{{"plain", ""}, {"states", "g"}} {
		golden.Check(t, filepath.Join("testdata", "graph", tt.name+".dot"), graphDOT(t, tt.task))
	}
}

// TestGraphDOTRenders has Graphviz render the DOT output: the CI installs
// the graphviz package.
func TestGraphDOTRenders(t *testing.T) {
	dot, err := exec.LookPath("dot")
	if err != nil {
		t.Skipf("Graphviz's dot is not installed (apt-get install graphviz): %v", err)
	}
	for _, task := range []string{"", "g"} {
		cmd := exec.Command(dot, "-Tsvg")
		cmd.Stdin = bytes.NewReader(graphDOT(t, task))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		svg, err := cmd.Output()
		if err != nil || stderr.Len() > 0 {
			t.Fatalf("dot -Tsvg: %v: %s", err, stderr.String())
		}
		for _, want := range []string{"<svg", "<title>fetch</title>", "<title>transform&#45;&gt;publish</title>", "<title>publish&#45;&gt;end</title>"} {
			if !bytes.Contains(svg, []byte(want)) {
				t.Errorf("task %q: SVG lacks %q", task, want)
			}
		}
	}
}

// graphDOT returns the test pipeline's graph in DOT, coloured by task's
// states when task is not empty.
func graphDOT(t *testing.T, task string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := history.WriteDOT(&b, graphOf(t, graphTask(t), history.GraphOptions{TaskID: task})); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestGraphMermaid checks the Mermaid flowchart against its golden file.
func TestGraphMermaid(t *testing.T) {
	for _, tt := range []struct{ name, task string }{{"plain", ""}, {"states", "g"}} {
		var b bytes.Buffer
		if err := history.WriteMermaid(&b, graphOf(t, graphTask(t), history.GraphOptions{TaskID: tt.task})); err != nil {
			t.Fatal(err)
		}
		golden.Check(t, filepath.Join("testdata", "graph", tt.name+".mmd"), b.Bytes())
	}
}

// TestGraphErrors checks that a bad pipeline or task id is refused.
func TestGraphErrors(t *testing.T) {
	e := runsOf(engine.Options{StateDir: t.TempDir()})
	if _, err := e.Graph("testdata/graph/missing.yaml", history.GraphOptions{}); err == nil {
		t.Errorf("history.Graph(missing file) = nil error")
	}
	var ue *usage.Error
	if _, err := e.Graph(graphPipeline, history.GraphOptions{TaskID: "../x"}); err == nil || !errors.As(err, &ue) {
		t.Errorf("history.Graph(task ../x) = %v, want a UsageError", err)
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestGraphSubPipeline checks that a run: step's sub-pipeline is drawn
// beside it: a DOT cluster and a Mermaid subgraph, its nodes named apart
// from the parent's, a dashed edge to its first steps.
func TestGraphSubPipeline(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "p.yaml"), "task_name: p\nsteps:\n  - id: a\n    command: echo\n"+
		"  - id: sub\n    run: c.yaml\n    with: {n: 1}\n    depends_on: [a]\n")
	writeFile(t, filepath.Join(dir, "c.yaml"), "task_name: c\nsteps:\n  - id: a\n    command: echo {{n}}\n"+
		"  - id: b\n    command: echo\n    depends_on: [a]\n")
	g, err := runsOf(engine.Options{StateDir: t.TempDir()}).Graph(filepath.Join(dir, "p.yaml"), history.GraphOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var dot, mmd bytes.Buffer
	if err := history.WriteDOT(&dot, g); err != nil {
		t.Fatal(err)
	}
	if err := history.WriteMermaid(&mmd, g); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"  subgraph \"cluster_sub\" {\n",
		"    \"sub/a\" [label=\"a\"];\n",
		"    \"sub/a\" -> \"sub/b\";\n",
		"  \"sub\" -> \"sub/a\" [style=dashed];\n",
		"  \"a\" -> \"sub\";\n",
	} {
		if !strings.Contains(dot.String(), want) {
			t.Errorf("WriteDOT() lacks %q:\n%s", want, dot.String())
		}
	}
	for _, want := range []string{"  subgraph s1_run[\"run ", "    s2[\"a\"]\n", "    s2 --> s3\n", "  end\n", "  s1 -.-> s2\n"} {
		if !strings.Contains(mmd.String(), want) {
			t.Errorf("WriteMermaid() lacks %q:\n%s", want, mmd.String())
		}
	}
}
