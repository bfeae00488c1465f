package pipeline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTriggersRefused: each mistake in triggers: is reported with its
// file:line and what to do.
func TestTriggersRefused(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "up.yaml"), []byte("task_name: up\nsteps: [{id: a, command: x}]\n"), 0o644)
	cases := []struct{ name, triggers, want string }{
		{"unknown pipeline", "  - after: nope.yaml\n", `:5: triggers[1].after names "nope.yaml", which is no pipeline file`},
		{"itself", "  - after: p.yaml\n", "names this pipeline itself"},
		{"not yaml", "  - after: up.txt\n", "must name a pipeline file"},
		{"bad status", "  - after: up.yaml\n    status: done\n", `:6: triggers[1].status must be success, failure or any, not "done"`},
		{"bad glob", "  - file: 'in/[a.csv'\n", `:5: triggers[1].file "in/[a.csv" is not a glob`},
		{"glob in a folder", "  - file: 'in*/a.csv'\n", "has a wildcard in a folder"},
		{"two kinds", "  - after: up.yaml\n    webhook: w\n", "a trigger is one of after:, file: or webhook:"},
		{"no kind", "  - status: any\n", "has no after:, file: or webhook:"},
		{"key of another kind", "  - file: 'in/*.csv'\n    status: any\n", "triggers[1].status is a setting of after: triggers"},
		{"settle typo", "  - file: 'in/*.csv'\n    settle: 5\n", `unknown key "settle" (did you mean "settle_seconds"?)`},
		{"webhook without secret", "  - webhook: deploy\n", `:5: webhook "deploy" has no secret`},
		{"undeclared secret", "  - webhook: deploy\n    secret: NOPE\n", `secret "NOPE" is not declared under secrets:`},
		{"bad hook name", "  - webhook: a/b\n    secret: TOKEN\n", "may only hold letters"},
		{"bad JSON path", "  - webhook: deploy\n    secret: TOKEN\n    vars: {region: ref}\n", `must start with $`},
		{"undeclared var", "  - webhook: deploy\n    secret: TOKEN\n    vars: {branch: $.ref}\n", "vars.branch is not declared under vars:"},
		{"hook twice", "  - webhook: d\n    secret: TOKEN\n  - webhook: d\n    secret: TOKEN\n", `declares webhook "d" again`},
	}
	for _, c := range cases {
		src := "task_name: p\nvars: {region: eu}\nsecrets: [TOKEN]\ntriggers:\n" + c.triggers + "steps: [{id: a, command: x}]\n"
		path := filepath.Join(dir, "p.yaml")
		os.WriteFile(path, []byte(src), 0o644)
		_, err := Load(path, LoadOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// TestTriggerPlaceholders: {{trigger.…}} is known only with triggers:,
// unknown names are refused, and the names used are noted so that a run
// no trigger started renders them empty.
func TestTriggerPlaceholders(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "up.yaml"), []byte("task_name: up\nsteps: [{id: a, command: x}]\n"), 0o644)
	path := filepath.Join(dir, "p.yaml")
	load := func(src string) (*Pipeline, error) {
		os.WriteFile(path, []byte(src), 0o644)
		return Load(path, LoadOptions{})
	}
	if _, err := load("task_name: p\nsteps: [{id: a, command: 'echo {{trigger.task_id}}'}]\n"); err == nil ||
		!strings.Contains(err.Error(), "known only in a pipeline with triggers:") {
		t.Errorf("without triggers: %v", err)
	}
	if _, err := load("task_name: p\ntriggers: [{after: up.yaml}]\nsteps: [{id: a, command: 'echo {{trigger.taskid}}'}]\n"); err == nil ||
		!strings.Contains(err.Error(), `did you mean "task_id"`) {
		t.Errorf("unknown name: %v", err)
	}
	p, err := load("task_name: p\ntriggers: [{after: up.yaml}]\nsteps: [{id: a, command: 'echo {{trigger.task_id}} {{trigger.outputs.a.k}}'}]\n")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(p.TriggerVars, " "); got != "trigger.task_id trigger.outputs.a.k" {
		t.Errorf("TriggerVars = %q", got)
	}
	if _, err := Load(path, LoadOptions{Vars: map[string]string{"trigger.task_id": "x"}}); err != nil {
		t.Errorf("--var trigger.task_id: %v", err)
	}
	if _, err := Load(path, LoadOptions{Vars: map[string]string{"trigger.bogus": "x"}}); err == nil {
		t.Errorf("--var trigger.bogus was accepted")
	}
}
