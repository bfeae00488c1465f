package engine

import (
	"fmt"
	"slices"
	"testing"

	"apollo/engine/pipeline"
)

func TestTaskFailedErrorMessage(t *testing.T) {
	many := make([]string, 25)
	for i := range many {
		many[i] = fmt.Sprintf("s%d", i)
	}
	tests := []struct {
		failed, blocked []string
		want            string
	}{
		{[]string{"a"}, nil, "task t failed at step a"},
		{[]string{"a"}, []string{"b", "c"}, "task t failed at step a; blocked: b, c"},
		{nil, []string{"b"}, "task t did not complete: blocked: b"},
		{many, nil, "task t failed at steps s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12, s13, s14, s15, s16, s17, s18, s19 and 5 more"},
	}
	for _, tt := range tests {
		e := &TaskFailedError{TaskID: "t", Failed: tt.failed, Blocked: tt.blocked}
		if got := e.Error(); got != tt.want {
			t.Errorf("TaskFailedError{%v, %v}.Error() = %q, want %q", tt.failed, tt.blocked, got, tt.want)
		}
	}
}

func TestCompleteChanges(t *testing.T) {
	p := &pipeline.Pipeline{Steps: []*pipeline.Step{
		{ID: "a"}, {ID: "b", DependsOn: []string{"a"}}, {ID: "c", DependsOn: []string{"b"}}, {ID: "d"},
	}}
	tests := []struct {
		changed []string
		want    []string
	}{
		{nil, nil},
		{[]string{"b"}, []string{"task complete; step b changed since: run with --resume-from b to rerun it"}},
		{[]string{"b", "c"}, []string{"task complete; steps b, c changed since: run with --resume-from b to rerun them"}},
		{[]string{"c", "d"}, []string{
			"task complete; step c changed since: run with --resume-from c to rerun it",
			"task complete; step d changed since: run with --resume-from d to rerun it",
		}},
	}
	for _, tt := range tests {
		if got := completeChanges(p, tt.changed); !slices.Equal(got, tt.want) {
			t.Errorf("completeChanges(%v) = %q, want %q", tt.changed, got, tt.want)
		}
	}
}
