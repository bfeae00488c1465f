package web

import (
	"fmt"
	"html/template"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// node is one step of a DAG to draw.
type node struct {
	ID        string
	DependsOn []string
	State     string // SUCCESS, FAILED, RUNNING, SKIPPED, PENDING, DIRTY; "" for a pipeline's graph
	Optional  bool
}

// maxDrawnSteps is the largest DAG drawn: beyond it the SVG would weigh
// megabytes and say nothing a table does not.
const maxDrawnSteps = 3000

// Layout sizes, in SVG units.
const (
	nodeH    = 30
	rowGap   = 14
	colGap   = 60
	charW    = 7.2
	maxLabel = 32
	padding  = 10
)

// stateClass is the CSS class of a state: colours live in app.css, so
// that a live update changes a class and no inline style is needed.
func stateClass(state string) string {
	if state == "" {
		return "st-none"
	}
	return "st-" + strings.ToLower(state)
}

// shorten cuts a label to maxLabel characters.
func shorten(s string) string {
	if utf8.RuneCountInString(s) <= maxLabel {
		return s
	}
	r := []rune(s)
	return string(r[:maxLabel-1]) + "…"
}

// dagSVG lays out nodes in columns by depth (the longest path from a root),
// left to right, each column ordered by the average row of its
// dependencies, and draws them with their edges. Text goes through
// html/template's escaping like everything else on a page.
func dagSVG(nodes []node, link func(id string) string) template.HTML {
	if len(nodes) == 0 {
		return ""
	}
	if len(nodes) > maxDrawnSteps {
		return template.HTML(fmt.Sprintf(`<p class="note">%d steps: too many to draw; the table below lists them.</p>`, len(nodes)))
	}
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		index[n.ID] = i
	}
	// Depth by the longest path, in an order where dependencies come first.
	depth := make([]int, len(nodes))
	for _, i := range topo(nodes, index) {
		for _, d := range nodes[i].DependsOn {
			if j, ok := index[d]; ok {
				depth[i] = max(depth[i], depth[j]+1)
			}
		}
	}
	cols := 0
	for _, d := range depth {
		cols = max(cols, d+1)
	}
	columns := make([][]int, cols)
	for i := range nodes {
		columns[depth[i]] = append(columns[depth[i]], i)
	}
	row := make([]float64, len(nodes))
	for c, col := range columns {
		if c > 0 {
			key := func(i int) float64 {
				sum, n := 0.0, 0
				for _, d := range nodes[i].DependsOn {
					if j, ok := index[d]; ok {
						sum += row[j]
						n++
					}
				}
				if n == 0 {
					return 0
				}
				return sum / float64(n)
			}
			slices.SortStableFunc(col, func(a, b int) int {
				ka, kb := key(a), key(b)
				switch {
				case ka < kb:
					return -1
				case ka > kb:
					return 1
				}
				return 0
			})
		}
		for r, i := range col {
			row[i] = float64(r)
		}
	}
	width := make([]float64, cols)
	for i, n := range nodes {
		width[depth[i]] = max(width[depth[i]], float64(utf8.RuneCountInString(shorten(n.ID)))*charW+24)
	}
	x := make([]float64, cols)
	for c := 1; c < cols; c++ {
		x[c] = x[c-1] + width[c-1] + colGap
	}
	rows := 0
	for _, col := range columns {
		rows = max(rows, len(col))
	}
	W := x[cols-1] + width[cols-1] + 2*padding
	H := float64(rows)*(nodeH+rowGap) - rowGap + 2*padding
	pos := func(i int) (float64, float64) {
		return padding + x[depth[i]], padding + row[i]*(nodeH+rowGap)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="dag" xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="step graph">`, W, H, W, H)
	b.WriteString(`<g class="edges">`)
	for i, n := range nodes {
		x2, y2 := pos(i)
		for _, d := range n.DependsOn {
			j, ok := index[d]
			if !ok {
				continue
			}
			x1, y1 := pos(j)
			x1 += width[depth[j]]
			y1 += nodeH / 2
			y2c := y2 + nodeH/2
			mid := (x1 + x2) / 2
			fmt.Fprintf(&b, `<path d="M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f"/>`, x1, y1, mid, y1, mid, y2c, x2, y2c)
		}
	}
	b.WriteString(`</g>`)
	for i, n := range nodes {
		px, py := pos(i)
		cls := "node " + stateClass(n.State)
		if n.Optional {
			cls += " optional"
		}
		id := template.HTMLEscapeString(n.ID)
		open, close := "", ""
		if link != nil {
			open, close = fmt.Sprintf(`<a href="%s">`, template.HTMLEscapeString(link(n.ID))), `</a>`
		}
		fmt.Fprintf(&b, `<g class="%s" data-step="%s">%s<rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="6"/>`+
			`<text x="%.1f" y="%.1f">%s</text><title>%s %s</title>%s</g>`,
			cls, id, open, px, py, width[depth[i]], nodeH, px+12, py+nodeH/2+4,
			template.HTMLEscapeString(shorten(n.ID)), id, template.HTMLEscapeString(strings.ToLower(n.State)), close)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// topo orders the nodes so that each comes after its dependencies (nodes
// in a cycle, which a log cannot hold, keep their order).
func topo(nodes []node, index map[string]int) []int {
	indeg := make([]int, len(nodes))
	next := make([][]int, len(nodes))
	for i, n := range nodes {
		for _, d := range n.DependsOn {
			if j, ok := index[d]; ok {
				indeg[i]++
				next[j] = append(next[j], i)
			}
		}
	}
	var order, queue []int
	for i := range nodes {
		if indeg[i] == 0 {
			queue = append(queue, i)
		}
	}
	for len(queue) > 0 {
		i := queue[0]
		queue = queue[1:]
		order = append(order, i)
		for _, j := range next[i] {
			if indeg[j]--; indeg[j] == 0 {
				queue = append(queue, j)
			}
		}
	}
	if len(order) < len(nodes) {
		placed := make([]bool, len(nodes))
		for _, i := range order {
			placed[i] = true
		}
		for i := range nodes {
			if !placed[i] {
				order = append(order, i)
			}
		}
	}
	return order
}

// maxGanttRows bounds the timeline: the first attempts of a huge run.
const maxGanttRows = 1500

// ganttSVG draws the attempts as bars on a time axis, one row each in the
// order they started: steps that ran in parallel overlap in time. An
// attempt still running ends at now.
func ganttSVG(atts []attempt, now time.Time) (template.HTML, int) {
	if len(atts) == 0 {
		return "", 0
	}
	shown := atts
	if len(shown) > maxGanttRows {
		shown = shown[:maxGanttRows]
	}
	t0, t1 := shown[0].Start, shown[0].Start
	for _, a := range shown {
		if a.Start.Before(t0) {
			t0 = a.Start
		}
		end := a.End
		if end.IsZero() {
			end = now
		}
		if end.After(t1) {
			t1 = end
		}
	}
	span := t1.Sub(t0).Seconds()
	if span <= 0 {
		span = 0.001
	}
	const labelW, plotW, rowH = 220.0, 760.0, 16.0
	H := float64(len(shown))*rowH + 34
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="gantt" xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="timeline of attempts">`,
		labelW+plotW+40, H, labelW+plotW+40, H)
	// Axis: five ticks from the first start.
	for i := 0; i <= 4; i++ {
		x := labelW + plotW*float64(i)/4
		fmt.Fprintf(&b, `<line class="tick" x1="%.1f" y1="14" x2="%.1f" y2="%.1f"/><text class="axis" x="%.1f" y="10" text-anchor="middle">+%s</text>`,
			x, x, H, x, template.HTMLEscapeString(shortDur(time.Duration(span*float64(i)/4*float64(time.Second)))))
	}
	for i, a := range shown {
		end := a.End
		if end.IsZero() {
			end = now
		}
		y := 20 + float64(i)*rowH
		x := labelW + plotW*a.Start.Sub(t0).Seconds()/span
		w := max(1.5, plotW*end.Sub(a.Start).Seconds()/span)
		label := shorten(a.Step)
		if a.Retry > 0 {
			label += fmt.Sprintf(" #%d", a.Retry)
		}
		fmt.Fprintf(&b, `<g class="bar %s" data-step="%s"><text x="4" y="%.1f">%s</text><rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="2"/><title>%s attempt %d: %s, %s</title></g>`,
			stateClass(a.Status), template.HTMLEscapeString(a.Step), y+11, template.HTMLEscapeString(label), x, y+2, w, rowH-4,
			template.HTMLEscapeString(a.Step), a.Retry, template.HTMLEscapeString(strings.ToLower(a.Status)),
			template.HTMLEscapeString(shortDur(end.Sub(a.Start))))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()), len(shown)
}

// shortDur writes d for an axis: 850ms, 12.3s, 4m10s, 2h05m.
func shortDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
