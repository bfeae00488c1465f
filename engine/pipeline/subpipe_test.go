package pipeline

import (
	"maps"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunChecks loads pipelines whose run: steps name other files, with
// the checks apollo validate makes, and compares every problem reported.
func TestRunChecks(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string // "" for no problem
	}{
		{
			name: "ok",
			files: map[string]string{
				"a.yaml":     "task_name: a\nsteps:\n  - id: x\n    run: sub/b.yaml\n    with: {region: eu, n: 3}\n",
				"sub/b.yaml": "task_name: b\nvars: {region: us}\nsteps:\n  - id: y\n    command: echo {{region}} {{n}}\n",
			},
		},
		{
			name:  "missing",
			files: map[string]string{"a.yaml": "task_name: a\nsteps:\n  - id: x\n    run: nope.yaml\n"},
			want:  `a.yaml:4: step "x": run "nope.yaml" does not exist (it is relative to the pipeline's folder); create it or fix the path`,
		},
		{
			name: "cycle",
			files: map[string]string{
				"a.yaml": "task_name: a\nsteps:\n  - id: x\n    run: b.yaml\n",
				"b.yaml": "task_name: b\nsteps:\n  - id: first\n    command: echo\n  - id: y\n    run: a.yaml\n",
			},
			want: `a.yaml:4: step "x": run "b.yaml": the sub-pipeline has 1 problem(s), listed below with its file and lines` + "\n" +
				`b.yaml:6: step "y": run "a.yaml" is a cycle of sub-pipelines: a.yaml -> b.yaml -> a.yaml; a pipeline cannot run itself, directly or not`,
		},
		{
			name:  "itself",
			files: map[string]string{"a.yaml": "task_name: a\nsteps:\n  - id: x\n    run: ./a.yaml\n"},
			want:  `a.yaml:4: step "x": run "a.yaml" is a cycle of sub-pipelines: a.yaml -> a.yaml; a pipeline cannot run itself, directly or not`,
		},
		{
			name: "child problem",
			files: map[string]string{
				"a.yaml": "task_name: a\nsteps:\n  - id: x\n    run: b.yaml\n",
				"b.yaml": "task_name: b\nsteps:\n  - id: y\n    comand: echo\n",
			},
			want: `a.yaml:4: step "x": run "b.yaml": the sub-pipeline has 2 problem(s), listed below with its file and lines` + "\n" +
				`b.yaml:3: step "y": has no body; add one of command, lua, script, uses or run` + "\n" +
				`b.yaml:4: step "y": unknown key "comand" (did you mean "command"?)`,
		},
		{
			name: "unknown var",
			files: map[string]string{
				"a.yaml": "task_name: a\nsteps:\n  - id: x\n    run: b.yaml\n    with: {regoin: eu, task_id: t}\n",
				"b.yaml": "task_name: b\nvars: {region: us}\nsteps:\n  - id: y\n    command: echo {{region}}\n",
			},
			want: `a.yaml:5: step "x": with.regoin: b.yaml declares no variable "regoin" and uses no {{regoin}} (did you mean "region"?)` + "\n" +
				`a.yaml:5: step "x": with.task_id: task_id is built in and set by apollo for the sub-pipeline; it cannot be passed`,
		},
		{
			name: "unknown var, its own line",
			files: map[string]string{
				"a.yaml": "task_name: a\nsteps:\n  - id: x\n    run: b.yaml\n    with:\n      region: eu\n      szie: big\n",
				"b.yaml": "task_name: b\nvars: {region: us, size: s}\nsteps:\n  - id: y\n    command: echo {{region}} {{size}}\n",
			},
			want: `a.yaml:7: step "x": with.szie: b.yaml declares no variable "szie" and uses no {{szie}} (did you mean "size"?)`,
		},
		{
			name: "keys",
			files: map[string]string{
				"a.yaml": "task_name: a\nsteps:\n  - id: x\n    run: b.txt\n  - id: z\n    run: ../b.yaml\n  - id: w\n    run: b.yaml\n    env: {A: b}\n    with: {l: [1]}\n",
				"b.yaml": "task_name: b\nvars: {l: x}\nsteps:\n  - id: y\n    command: echo\n",
			},
			want: `a.yaml:4: step "x": run "b.txt" must name a pipeline file (.yaml or .yml) to run as a sub-pipeline; a shell command is written command:` + "\n" +
				`a.yaml:6: step "z": run "../b.yaml" leaves the pipeline's folder; keep it inside` + "\n" +
				`a.yaml:9: step "w": env does not apply to a run step: the sub-pipeline's steps set their own; remove it` + "\n" +
				`a.yaml:10: step "w": with.l: a run step's with: sets variables of the sub-pipeline, which are text; give a string, a number or a boolean`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, src := range tt.files {
				writeFile(t, filepath.Join(dir, name), []byte(src))
			}
			_, err := Load(filepath.Join(dir, "a.yaml"), LoadOptions{CheckRefs: true, Workdir: dir})
			got := ""
			if err != nil {
				got = strings.ReplaceAll(err.Error(), dir+string(filepath.Separator), "")
			}
			if got != tt.want {
				t.Errorf("Load() error =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestChildTaskID(t *testing.T) {
	tests := []struct{ parent, step, want string }{
		{"daily-2026-12-04", "load", "daily-2026-12-04~load"},
		{"t", "convert[eu,us]", "t~convert_eu_us_"},
		{"t~load", "x", "t~load~x"},
	}
	for _, tt := range tests {
		if got := ChildTaskID(tt.parent, tt.step); got != tt.want {
			t.Errorf("ChildTaskID(%q, %q) = %q, want %q", tt.parent, tt.step, got, tt.want)
		}
	}
}

// TestRunVars checks what a sub-pipeline is run with: the parent's
// variables it declares (and task_date), under its with: values.
func TestRunVars(t *testing.T) {
	p := &Pipeline{Vars: map[string]string{"region": "us", "size": "s"}}
	inherited := map[string]string{"region": "eu", "size": "m", "other": "x", "task_date": "2026-12-01"}
	got := p.RunVars(inherited, map[string]string{"size": "big"})
	want := map[string]string{"region": "eu", "size": "big", "task_date": "2026-12-01"}
	if !maps.Equal(got, want) {
		t.Errorf("RunVars() = %v, want %v", got, want)
	}
	if got := p.RunVars(nil, map[string]string{"a": "b"}); !maps.Equal(got, map[string]string{"a": "b"}) {
		t.Errorf("RunVars(no parent) = %v, want the --var values", got)
	}
}
