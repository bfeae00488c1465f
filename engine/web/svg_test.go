package web

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDAGLayout checks that each step is drawn in the column of its
// longest path from a root, and that ids are escaped.
func TestDAGLayout(t *testing.T) {
	nodes := []node{{ID: "a"}, {ID: "b", DependsOn: []string{"a"}}, {ID: "c"}, {ID: "d", DependsOn: []string{"b", "c"}},
		{ID: `x"<y>`, DependsOn: []string{"a"}, State: "FAILED"}}
	svg := string(dagSVG(nodes, nil))
	x := map[string]float64{}
	for _, m := range regexp.MustCompile(`data-step="([^"]*)"><rect x="([0-9.]+)"`).FindAllStringSubmatch(svg, -1) {
		x[m[1]], _ = strconv.ParseFloat(m[2], 64)
	}
	switch {
	case len(x) != 5:
		t.Fatalf("drew %d nodes, want 5:\n%s", len(x), svg)
	case x["a"] != x["c"]:
		t.Errorf("roots a and c in columns at %v and %v, want one", x["a"], x["c"])
	case !(x["a"] < x["b"] && x["b"] < x["d"]):
		t.Errorf("a, b, d at %v, %v, %v: want each right of the one before", x["a"], x["b"], x["d"])
	case x["x&#34;&lt;y&gt;"] != x["b"]:
		t.Errorf("the escaped id is not drawn beside b: %v", x)
	}
	if strings.Contains(svg, `x"<y>`) {
		t.Errorf("an id is drawn unescaped")
	}
	if !strings.Contains(svg, `class="node st-failed"`) {
		t.Errorf("a failed step is not coloured as failed")
	}
	if got := string(dagSVG(make([]node, maxDrawnSteps+1), nil)); !strings.Contains(got, "too many to draw") {
		t.Errorf("a huge DAG: %.80s, want a note", got)
	}
}

// TestGantt checks that attempts that ran at once overlap, and that a huge
// timeline is cut.
func TestGantt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	atts := []attempt{
		{Step: "a", Start: t0, End: t0.Add(10 * time.Second), Status: "SUCCESS"},
		{Step: "b", Start: t0.Add(time.Second), End: t0.Add(6 * time.Second), Status: "FAILED"},
		{Step: "c", Start: t0.Add(10 * time.Second), Status: "RUNNING"},
	}
	svg, rows := ganttSVG(atts, t0.Add(20*time.Second))
	if rows != 3 {
		t.Errorf("rows = %d, want 3", rows)
	}
	var bars [][2]float64
	for _, m := range regexp.MustCompile(`<rect x="([0-9.]+)" y="[0-9.]+" width="([0-9.]+)"`).FindAllStringSubmatch(string(svg), -1) {
		x, _ := strconv.ParseFloat(m[1], 64)
		w, _ := strconv.ParseFloat(m[2], 64)
		bars = append(bars, [2]float64{x, x + w})
	}
	if len(bars) != 3 {
		t.Fatalf("%d bars", len(bars))
	}
	if !(bars[1][0] < bars[0][1] && bars[1][1] > bars[0][0]) {
		t.Errorf("a %v and b %v ran at once but do not overlap", bars[0], bars[1])
	}
	if bars[2][1] < bars[0][1]+100 {
		t.Errorf("the running attempt %v does not reach now", bars[2])
	}
	many := make([]attempt, maxGanttRows+5)
	for i := range many {
		many[i] = attempt{Step: "s", Start: t0, End: t0.Add(time.Second), Status: "SUCCESS"}
	}
	if _, rows := ganttSVG(many, t0); rows != maxGanttRows {
		t.Errorf("rows = %d, want the cap %d", rows, maxGanttRows)
	}
}

// TestDAGHandlers checks that handlers are drawn after every step, the
// on_failure list before the finally list, each under its name, and not
// in the first column like roots.
func TestDAGHandlers(t *testing.T) {
	nodes := []node{{ID: "a"}, {ID: "b", DependsOn: []string{"a"}}, {ID: "c", DependsOn: []string{"b"}},
		{ID: "alert", Handler: "on_failure", Optional: true},
		{ID: "tidy", Handler: "finally", Optional: true}, {ID: "report", DependsOn: []string{"tidy"}, Handler: "finally", Optional: true}}
	svg := string(dagSVG(nodes, nil))
	x := map[string]float64{}
	for _, m := range regexp.MustCompile(`data-step="([^"]*)"><rect x="([0-9.]+)"`).FindAllStringSubmatch(svg, -1) {
		x[m[1]], _ = strconv.ParseFloat(m[2], 64)
	}
	if len(x) != 6 {
		t.Fatalf("drew %d nodes, want 6:\n%s", len(x), svg)
	}
	if !(x["c"] < x["alert"] && x["alert"] < x["tidy"] && x["tidy"] < x["report"]) {
		t.Errorf("c, alert, tidy, report at %v, %v, %v, %v: want each right of the one before", x["c"], x["alert"], x["tidy"], x["report"])
	}
	for _, label := range []string{">on_failure</text>", ">finally</text>"} {
		if !strings.Contains(svg, label) {
			t.Errorf("no label %s:\n%s", label, svg)
		}
	}
	if !strings.Contains(svg, `class="node st-none optional handler" data-step="alert"`) {
		t.Errorf("a handler's node is not classed a handler:\n%s", svg)
	}
}
