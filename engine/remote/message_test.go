package remote

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"apollo/engine/pipeline"
)

// TestWorkMessage: the work message of a plain step is small (the
// pipeline's zero fields are left out), and a worker decodes the pipeline
// and step the coordinator sent, nil and empty maps alike.
func TestWorkMessage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.yaml")
	yaml := "task_name: wide\nvars: {}\nsteps:\n  - id: a\n    command: \"true\"\n  - id: b\n    command: echo $X\n    env: {X: \"1\"}\n    depends_on: [a]\n    timeout_seconds: 5\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := pipeline.Load(path, pipeline.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Steps {
		one := *p
		one.Source, one.Steps = nil, []*pipeline.Step{s}
		w := &Work{Task: "t", Step: s.ID, Pool: DefaultPool, Pipeline: &one, Command: s.Command,
			Env: []string{"APOLLO_TASK_ID=t", "APOLLO_STEP_ID=" + s.ID}}
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 900 {
			t.Errorf("step %s: the work message is %d bytes: %s", s.ID, len(b), b)
		}
		var got Work
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		gotStep := got.StepDef()
		pl := *got.Pipeline
		pl.Steps, one.Steps = nil, nil
		if !reflect.DeepEqual(pl, one) {
			t.Errorf("step %s: the worker decodes\n%+v\nwant\n%+v", s.ID, pl, one)
		}
		if !exportedEqual(*gotStep, *s) {
			t.Errorf("step %s: the worker's step is\n%+v\nwant\n%+v", s.ID, gotStep, s)
		}
	}
}

// exportedEqual reports whether two values of one struct type have deeply
// equal exported fields (a step's unexported index is the loader's, never
// sent).
func exportedEqual(a, b any) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		if va.Type().Field(i).IsExported() && !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			return false
		}
	}
	return true
}
