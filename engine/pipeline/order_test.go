package pipeline

import (
	"fmt"
	"strings"
	"testing"
)

// TestTopoOrder: dependencies first, ties in file order, whether the file
// lists steps in order or not, built by hand or loaded (which resolves the
// dependencies once).
func TestTopoOrder(t *testing.T) {
	tests := []struct {
		name  string
		steps []*Step
		want  string
	}{
		{"out of order", []*Step{
			{ID: "d", DependsOn: []string{"b", "c"}},
			{ID: "c", DependsOn: []string{"a"}},
			{ID: "b", DependsOn: []string{"a"}},
			{ID: "a"},
			{ID: "e"},
		}, "a c b d e"},
		{"in order", []*Step{
			{ID: "a"},
			{ID: "b", DependsOn: []string{"a"}},
			{ID: "c"},
			{ID: "d", DependsOn: []string{"c", "b"}},
		}, "a b c d"},
		{"one step late", []*Step{
			{ID: "a", DependsOn: []string{"z"}},
			{ID: "b"},
			{ID: "z"},
		}, "b z a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var src strings.Builder
			src.WriteString("task_name: t\nsteps:\n")
			for _, s := range tt.steps {
				fmt.Fprintf(&src, "  - {id: %s, command: x, depends_on: [%s]}\n", s.ID, strings.Join(s.DependsOn, ", "))
			}
			loaded, _, err := loadString(t, src.String(), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range []*Pipeline{{Steps: tt.steps}, loaded} {
				var got []string
				for _, i := range p.TopoOrder() {
					got = append(got, p.Steps[i].ID)
				}
				if g := strings.Join(got, " "); g != tt.want {
					t.Errorf("topoOrder = %q, want %q", g, tt.want)
				}
			}
		})
	}
	p := &Pipeline{Steps: tests[0].steps}
	desc := p.Descendants("c")
	if len(desc) != 2 || !desc["c"] || !desc["d"] {
		t.Errorf("descendants(c) = %v, want c and d", desc)
	}
}
