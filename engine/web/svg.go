package web

import (
	"fmt"
	"html/template"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"apollo/engine/pipeline"
)

// node is one step of a DAG to draw.
type node struct {
	ID        string
	DependsOn []string
	State     string // SUCCESS, FAILED, RUNNING, SKIPPED, PENDING, DIRTY; "" for a pipeline's graph
	Optional  bool
	// Handler is the handler list of a handler ("on_failure", "finally"),
	// "" for a step: handlers are drawn after every step, list by list.
	Handler string
}

// handlerLists are the handler lists in the order they run.
var handlerLists = []string{pipeline.HandlerOnFailure, pipeline.HandlerFinally}

// labelH is the height of the band above the columns that names the
// handler lists, when there are handlers.
const labelH = 18

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
	l := layOut(nodes)
	W, H := l.size()
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="dag" xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="step graph">`, W, H, W, H)
	l.drawLabels(&b)
	l.drawEdges(&b)
	l.drawNodes(&b, link)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// dagLayout places a DAG's nodes: a column for each depth, a row within it.
type dagLayout struct {
	nodes   []node
	index   map[string]int // each node's place in nodes, by id
	depth   []int          // each node's column: the longest path from a root
	columns [][]int        // the nodes of each column, top to bottom
	row     []float64      // each node's row in its column
	width   []float64      // each column's width
	x       []float64      // each column's left edge
	top     float64        // the band above the columns: labelH with handlers
	// firstCol is the first column of each handler list drawn.
	firstCol map[string]int
}

// layOut places nodes, at least one.
func layOut(nodes []node) *dagLayout {
	l := &dagLayout{nodes: nodes, index: make(map[string]int, len(nodes))}
	for i, n := range nodes {
		l.index[n.ID] = i
	}
	l.setDepths()
	l.setColumns()
	l.setRows()
	l.setColumnEdges()
	return l
}

// setDepths sets each node's depth by the longest path, in an order where
// dependencies come first. Handlers depend only on handlers of their list
// and run once every step has settled: each list's columns come after the
// steps' and the lists' before it.
func (l *dagLayout) setDepths() {
	l.depth = make([]int, len(l.nodes))
	for _, i := range topo(l.nodes, l.index) {
		for _, d := range l.nodes[i].DependsOn {
			if j, ok := l.index[d]; ok {
				l.depth[i] = max(l.depth[i], l.depth[j]+1)
			}
		}
	}
	l.firstCol = map[string]int{}
	next := 0 // the first column after those drawn so far
	for _, list := range append([]string{""}, handlerLists...) {
		last := -1
		for i, n := range l.nodes {
			if n.Handler == list {
				l.depth[i] += next
				last = max(last, l.depth[i])
			}
		}
		if last >= 0 {
			if list != "" {
				l.firstCol[list] = next
				l.top = labelH
			}
			next = last + 1
		}
	}
}

// setColumns groups the nodes by depth, each column in the nodes' order.
func (l *dagLayout) setColumns() {
	cols := 0
	for _, d := range l.depth {
		cols = max(cols, d+1)
	}
	l.columns = make([][]int, cols)
	for i := range l.nodes {
		l.columns[l.depth[i]] = append(l.columns[l.depth[i]], i)
	}
}

// setRows orders each column after the first by the average row of its
// nodes' dependencies (stably: ties keep their order), column by column
// from the left, and numbers the rows.
func (l *dagLayout) setRows() {
	l.row = make([]float64, len(l.nodes))
	for c, col := range l.columns {
		if c > 0 {
			slices.SortStableFunc(col, func(a, b int) int {
				ka, kb := l.meanDependencyRow(a), l.meanDependencyRow(b)
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
			l.row[i] = float64(r)
		}
	}
}

// meanDependencyRow is the average row of node i's dependencies (0 with
// none drawn).
func (l *dagLayout) meanDependencyRow(i int) float64 {
	sum, n := 0.0, 0
	for _, d := range l.nodes[i].DependsOn {
		if j, ok := l.index[d]; ok {
			sum += l.row[j]
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// setColumnEdges makes each column as wide as its widest label and sets
// the columns colGap apart.
func (l *dagLayout) setColumnEdges() {
	cols := len(l.columns)
	l.width = make([]float64, cols)
	for i, n := range l.nodes {
		l.width[l.depth[i]] = max(l.width[l.depth[i]], float64(utf8.RuneCountInString(shorten(n.ID)))*charW+24)
	}
	l.x = make([]float64, cols)
	for c := 1; c < cols; c++ {
		l.x[c] = l.x[c-1] + l.width[c-1] + colGap
	}
}

// size is the drawing's width and height.
func (l *dagLayout) size() (float64, float64) {
	rows := 0
	for _, col := range l.columns {
		rows = max(rows, len(col))
	}
	last := len(l.columns) - 1
	W := l.x[last] + l.width[last] + 2*padding
	H := l.top + float64(rows)*(nodeH+rowGap) - rowGap + 2*padding
	return W, H
}

// pos is the top left corner of node i's box.
func (l *dagLayout) pos(i int) (float64, float64) {
	return padding + l.x[l.depth[i]], padding + l.top + l.row[i]*(nodeH+rowGap)
}

// drawLabels names each handler list above its first column, beside a
// dashed line that parts it from the columns before.
func (l *dagLayout) drawLabels(b *strings.Builder) {
	_, H := l.size()
	for _, list := range handlerLists {
		c, ok := l.firstCol[list]
		if !ok {
			continue
		}
		x := padding + l.x[c]
		if c > 0 {
			fmt.Fprintf(b, `<line class="handler-sep" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f"/>`, x-colGap/2, float64(padding)/2, x-colGap/2, H-float64(padding)/2)
		}
		fmt.Fprintf(b, `<text class="handler-label" x="%.1f" y="%.1f">%s</text>`, x, float64(padding)+12, list)
	}
}

// drawEdges draws a curve from each dependency's right side to its
// dependent's left side.
func (l *dagLayout) drawEdges(b *strings.Builder) {
	b.WriteString(`<g class="edges">`)
	for i, n := range l.nodes {
		x2, y2 := l.pos(i)
		for _, d := range n.DependsOn {
			j, ok := l.index[d]
			if !ok {
				continue
			}
			x1, y1 := l.pos(j)
			x1 += l.width[l.depth[j]]
			y1 += nodeH / 2
			y2c := y2 + nodeH/2
			mid := (x1 + x2) / 2
			fmt.Fprintf(b, `<path d="M%.1f %.1f C%.1f %.1f %.1f %.1f %.1f %.1f"/>`, x1, y1, mid, y1, mid, y2c, x2, y2c)
		}
	}
	b.WriteString(`</g>`)
}

// drawNodes draws each node as a box classed by its state, labelled with
// its (shortened) id, and linked to link(id) when link is set.
func (l *dagLayout) drawNodes(b *strings.Builder, link func(id string) string) {
	for i, n := range l.nodes {
		px, py := l.pos(i)
		cls := "node " + stateClass(n.State)
		if n.Optional {
			cls += " optional"
		}
		if n.Handler != "" {
			cls += " handler"
		}
		id := template.HTMLEscapeString(n.ID)
		open, close := "", ""
		if link != nil {
			open, close = fmt.Sprintf(`<a href="%s">`, template.HTMLEscapeString(link(n.ID))), `</a>`
		}
		fmt.Fprintf(b, `<g class="%s" data-step="%s">%s<rect x="%.1f" y="%.1f" width="%.1f" height="%d" rx="6"/>`+
			`<text x="%.1f" y="%.1f">%s</text><title>%s %s</title>%s</g>`,
			cls, id, open, px, py, l.width[l.depth[i]], nodeH, px+12, py+nodeH/2+4,
			template.HTMLEscapeString(shorten(n.ID)), id, template.HTMLEscapeString(strings.ToLower(n.State)), close)
	}
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
