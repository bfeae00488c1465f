package history

import (
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"apollo/engine/pipeline"
	"apollo/engine/statedir"
	"apollo/engine/usage"
	"apollo/eventlog"
)

// Graph formats.
const (
	GraphDOT     = "dot"
	GraphMermaid = "mermaid"
)

// StateDirty is the graph state of a step whose last attempt was cut off
// by a crash (its last record is a STEP_START and no runner holds the task).
const StateDirty = "dirty"

// GraphOptions are the flags of apollo graph.
type GraphOptions struct {
	// TaskID, when set, colours each step by its state in the task's newest
	// log (live, else archived).
	TaskID string
	// Vars are --var values, for the loader's template checks.
	Vars map[string]string
}

// Graph is a pipeline's DAG, its steps in dependency order.
type Graph struct {
	TaskName string
	TaskID   string // "" when no task was given
	Log      string // the log the states come from, "" if none
	Pipeline string // the pipeline file, as given
	Nodes    []GraphNode
}

// GraphNode is one step of a Graph.
type GraphNode struct {
	ID        string
	DependsOn []string
	Optional  bool
	// State is SUCCESS, FAILED, RUNNING, SKIPPED, PENDING or dirty; "" when
	// the graph has no task.
	State string
	// Child is the DAG of the sub-pipeline a run: step runs, its states
	// those of the child task; nil for other steps.
	Child *Graph
	// Cache is set for a step with cache:; CachedFrom names the task run
	// whose result it took from the cache, in the graph's task.
	Cache      bool
	CachedFrom string
	// Handler is the handler list of a handler ("on_failure", "finally"),
	// "" for a step of steps:. Handlers come after the steps.
	Handler string
}

// note is what a node's label says below its id and state of the cache.
func (n *GraphNode) note() string {
	switch {
	case n.CachedFrom != "":
		return "cached from " + n.CachedFrom
	case n.Cache && n.State == "":
		return "cache"
	}
	return ""
}

// Graph loads the pipeline at path and returns its DAG, with each step's
// state when o.TaskID is set.
func (h Runs) Graph(path string, o GraphOptions) (*Graph, error) {
	p, err := pipeline.Load(path, pipeline.LoadOptions{Vars: o.Vars})
	if err != nil {
		return nil, err
	}
	if o.TaskID != "" {
		if err := statedir.ValidTaskID(o.TaskID); err != nil {
			return nil, usage.Errorf("--task-id: %v", err)
		}
	}
	// A foreach or matrix step is drawn as its instances, as a run makes them.
	vars := maps.Clone(p.Vars)
	maps.Copy(vars, o.Vars)
	logPath := ""
	if o.TaskID != "" {
		if logPath, _, err = h.Dir.FindLog(o.TaskID); err != nil {
			return nil, err
		}
	}
	return h.graph(p, vars, o.TaskID, logPath, nil)
}

// graph is the DAG of p, rendered with vars, each step's state read from
// task taskID's log at logPath when taskID is set (every step pending when
// logPath is ""); a run: step holds its sub-pipeline's. within are the files of the pipelines being drawn, whose
// run: steps led here: a cycle (which validate reports) is drawn once.
func (h Runs) graph(p *pipeline.Pipeline, vars map[string]string, taskID, logPath string, within []string) (*Graph, error) {
	g := &Graph{TaskName: p.TaskName, TaskID: taskID, Pipeline: p.Path, Log: logPath}
	var steps map[string]*eventlog.StepState
	held := false
	if logPath != "" {
		state, _, err := statedir.Replay(logPath, taskID, nil)
		if err != nil {
			return nil, err
		}
		steps = state.Steps
		if state.Start != nil && state.Start.Vars != nil {
			vars = state.Start.Vars // the task's own: its foreach instances are those it ran
		}
		_, held = eventlog.Holder(h.Dir.Lock(taskID))
	}
	p, err := p.Expand(vars)
	if err != nil {
		return nil, err
	}
	self := pipeline.RealPath(filepath.Join(p.Dir, filepath.Base(p.Path)))
	within = append(slices.Clip(within), self)
	order := p.TopoOrder()
	slices.SortStableFunc(order, func(a, b int) int { return handlerRank(p.Steps[a].Handler) - handlerRank(p.Steps[b].Handler) })
	for _, i := range order {
		s := p.Steps[i]
		n := GraphNode{ID: s.ID, DependsOn: s.DependsOn, Optional: s.Optional, Cache: s.Cache != nil, Handler: s.Handler}
		if taskID != "" {
			n.State = eventlog.Pending
		}
		if st := steps[s.ID]; st != nil {
			n.CachedFrom = st.CachedFrom
			if st.Status != "" {
				n.State = st.Status
			}
			if st.Dirty && !held {
				n.State = StateDirty
			}
		}
		if s.Run != "" && !slices.Contains(within, pipeline.RealPath(filepath.Join(p.Dir, s.Run))) {
			child, err := pipeline.LoadRun(p, s)
			if err != nil {
				return nil, err
			}
			// The variables a run gives the child; its log's, when it has one.
			with := make(map[string]string, len(s.With))
			for k, v := range s.With {
				with[k] = fmt.Sprint(v)
			}
			cv := maps.Clone(child.Vars)
			maps.Copy(cv, child.RunVars(vars, with))
			childID, childPath := "", ""
			if taskID != "" {
				childID = pipeline.ChildTaskID(taskID, s.ID)
			}
			if st := steps[s.ID]; st != nil {
				childPath, _ = childLog(h.Dir, st, childID)
			}
			if n.Child, err = h.graph(child, cv, childID, childPath, within); err != nil {
				return nil, err
			}
		}
		g.Nodes = append(g.Nodes, n)
	}
	return g, nil
}

// stateColors are the fill and border of each state.
var stateColors = map[string][2]string{
	eventlog.Success: {"#b7e1b0", "#2e7d32"},
	eventlog.Failed:  {"#f4a6a6", "#c62828"},
	eventlog.Running: {"#ffe08a", "#f9a825"},
	eventlog.Skipped: {"#e0e0e0", "#757575"},
	eventlog.Pending: {"#ffffff", "#616161"},
	StateDirty:       {"#f7c58f", "#e65100"},
}

// graphStates is the order in which states are listed.
var graphStates = []string{eventlog.Success, eventlog.Failed, eventlog.Running, StateDirty, eventlog.Skipped, eventlog.Pending}

// runLabel names a sub-pipeline's graph inside its parent's.
func (g *Graph) runLabel() string { return "run " + g.Pipeline + ": " + g.title() }

func (g *Graph) title() string {
	if g.TaskID != "" {
		return g.TaskName + " (task " + g.TaskID + ")"
	}
	return g.TaskName
}

// dotQuote quotes s as a DOT string.
func dotQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

// WriteDOT prints g in Graphviz's DOT language: `apollo graph p.yaml |
// dot -Tsvg > dag.svg`. Optional steps have a dashed border; a run: step's
// sub-pipeline is a cluster (subgraph cluster_...) beside it, its nodes
// named STEP/CHILD_STEP, a dashed edge leading to each of its first steps.
func WriteDOT(w io.Writer, g *Graph) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote(g.TaskName))
	fmt.Fprintf(&b, "  graph [rankdir=LR, label=%s, labelloc=t, fontname=\"Helvetica\"];\n", dotQuote(g.title()))
	b.WriteString("  node [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", fontname=\"Helvetica\"];\n")
	b.WriteString("  edge [color=\"#616161\"];\n")
	writeDOTNodes(&b, g, "", "  ")
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// handlerGroups splits g's nodes into the steps and each handler list
// that has handlers, in the order they run, and gives the dashed edges
// that place each list after what runs before it: from each last node
// (none depends on it) of the group before to each first node of the list.
func handlerGroups(g *Graph) (groups [][]GraphNode, trigger [][2]string) {
	var steps []GraphNode
	byList := map[string][]GraphNode{}
	for _, n := range g.Nodes {
		if n.Handler == "" {
			steps = append(steps, n)
		} else {
			byList[n.Handler] = append(byList[n.Handler], n)
		}
	}
	groups = append(groups, steps)
	prev := steps
	for _, l := range HandlerLists {
		hs := byList[l.Name]
		if len(hs) == 0 {
			continue
		}
		for _, last := range lastNodes(prev) {
			for _, first := range hs {
				if len(first.DependsOn) == 0 {
					trigger = append(trigger, [2]string{last, first.ID})
				}
			}
		}
		groups = append(groups, hs)
		prev = hs
	}
	return groups, trigger
}

// lastNodes are the ids of the nodes no other of nodes depends on.
func lastNodes(nodes []GraphNode) []string {
	dep := map[string]bool{}
	for _, n := range nodes {
		for _, d := range n.DependsOn {
			dep[d] = true
		}
	}
	var out []string
	for _, n := range nodes {
		if !dep[n.ID] {
			out = append(out, n.ID)
		}
	}
	return out
}

// handlerLabel names a handler list's cluster: the list and what
// triggers it.
func handlerLabel(list string) string {
	for _, l := range HandlerLists {
		if l.Name == list {
			return l.Name + " handlers (" + l.Trigger + ")"
		}
	}
	return list
}

// writeDOTNodes writes g's nodes and edges, each node named prefix+id,
// each handler list in a cluster after the steps, and its sub-pipelines'
// clusters.
func writeDOTNodes(b *strings.Builder, g *Graph, prefix, indent string) {
	groups, trigger := handlerGroups(g)
	for gi, nodes := range groups {
		in := indent
		if gi > 0 {
			list := nodes[0].Handler
			fmt.Fprintf(b, "%ssubgraph %s {\n", indent, dotQuote("cluster_"+prefix+list))
			fmt.Fprintf(b, "%s  graph [label=%s, style=\"rounded,dashed\", color=\"#9e9e9e\"];\n", indent, dotQuote(handlerLabel(list)))
			in = indent + "  "
		}
		writeDOTBoxes(b, nodes, prefix, in)
		if gi > 0 {
			fmt.Fprintf(b, "%s}\n", indent)
		}
	}
	for _, e := range trigger {
		fmt.Fprintf(b, "%s%s -> %s [style=dashed, color=\"#9e9e9e\"];\n", indent, dotQuote(prefix+e[0]), dotQuote(prefix+e[1]))
	}
	writeDOTEdges(b, g, prefix, indent)
}

// writeDOTBoxes writes nodes, each named prefix+id.
func writeDOTBoxes(b *strings.Builder, nodes []GraphNode, prefix, indent string) {
	for _, n := range nodes {
		attrs := []string{}
		label := n.ID
		if n.State != "" {
			label += "\n" + n.State
			c := stateColors[n.State]
			attrs = append(attrs, fmt.Sprintf("fillcolor=%s", dotQuote(c[0])), fmt.Sprintf("color=%s", dotQuote(c[1])))
		}
		if note := n.note(); note != "" {
			label += "\n" + note
		}
		attrs = append([]string{"label=" + dotQuote(label)}, attrs...)
		if n.Optional {
			attrs = append(attrs, `style="rounded,filled,dashed"`)
		}
		fmt.Fprintf(b, "%s%s [%s];\n", indent, dotQuote(prefix+n.ID), strings.Join(attrs, ", "))
	}
}

// writeDOTEdges writes g's edges and its sub-pipelines' clusters.
func writeDOTEdges(b *strings.Builder, g *Graph, prefix, indent string) {
	for _, n := range g.Nodes {
		for _, d := range n.DependsOn {
			fmt.Fprintf(b, "%s%s -> %s;\n", indent, dotQuote(prefix+d), dotQuote(prefix+n.ID))
		}
	}
	for _, n := range g.Nodes {
		c := n.Child
		if c == nil {
			continue
		}
		inner := prefix + n.ID + "/"
		fmt.Fprintf(b, "%ssubgraph %s {\n", indent, dotQuote("cluster_"+prefix+n.ID))
		fmt.Fprintf(b, "%s  graph [label=%s, style=\"rounded,dashed\", color=\"#9e9e9e\"];\n", indent, dotQuote(c.runLabel()))
		writeDOTNodes(b, c, inner, indent+"  ")
		fmt.Fprintf(b, "%s}\n", indent)
		for _, cn := range c.Nodes {
			if len(cn.DependsOn) == 0 {
				fmt.Fprintf(b, "%s%s -> %s [style=dashed];\n", indent, dotQuote(prefix+n.ID), dotQuote(inner+cn.ID))
			}
		}
	}
}

// mermaidText escapes s for a quoted Mermaid label.
func mermaidText(s string) string {
	return strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;").Replace(s)
}

// WriteMermaid prints g as a Mermaid flowchart, for Markdown that GitHub
// and GitLab render. Nodes are named s0, s1, … (a step id such as "end"
// would be a Mermaid keyword); optional steps are drawn as stadiums; a
// run: step's sub-pipeline is a subgraph, a dashed edge leading to each of
// its first steps.
func WriteMermaid(w io.Writer, g *Graph) error {
	var b strings.Builder
	fmt.Fprintf(&b, "---\ntitle: %s\n---\nflowchart LR\n", g.title())
	m := &mermaid{b: &b, byState: map[string][]string{}}
	m.nodes(g, "  ")
	for _, st := range graphStates {
		members := m.byState[st]
		if len(members) == 0 {
			continue
		}
		c := stateColors[st]
		fmt.Fprintf(&b, "  classDef %s fill:%s,stroke:%s\n", strings.ToLower(st), c[0], c[1])
		fmt.Fprintf(&b, "  class %s %s\n", strings.Join(members, ","), strings.ToLower(st))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// mermaid writes a flowchart, numbering its nodes across subgraphs.
type mermaid struct {
	b       *strings.Builder
	next    int
	byState map[string][]string // node names by state
}

// nodes writes g's nodes and edges, then its sub-pipelines' subgraphs, and
// returns the name of each of g's nodes.
func (m *mermaid) nodes(g *Graph, indent string) map[string]string {
	name := map[string]string{}
	for _, n := range g.Nodes {
		name[n.ID] = fmt.Sprintf("s%d", m.next)
		m.next++
	}
	groups, trigger := handlerGroups(g)
	for gi, nodes := range groups {
		in := indent
		if gi > 0 {
			list := nodes[0].Handler
			fmt.Fprintf(m.b, "%ssubgraph %s_%s[\"%s\"]\n", indent, name[nodes[0].ID], list, mermaidText(handlerLabel(list)))
			in = indent + "  "
		}
		for _, n := range nodes {
			label := mermaidText(n.ID)
			if n.State != "" {
				label += "<br/>" + n.State
				m.byState[n.State] = append(m.byState[n.State], name[n.ID])
			}
			if note := n.note(); note != "" {
				label += "<br/>" + mermaidText(note)
			}
			open, close := "[", "]"
			if n.Optional {
				open, close = "([", "])"
			}
			fmt.Fprintf(m.b, "%s%s%s\"%s\"%s\n", in, name[n.ID], open, label, close)
		}
		if gi > 0 {
			fmt.Fprintf(m.b, "%send\n", indent)
		}
	}
	for _, e := range trigger {
		fmt.Fprintf(m.b, "%s%s -.-> %s\n", indent, name[e[0]], name[e[1]])
	}
	for _, n := range g.Nodes {
		for _, d := range n.DependsOn {
			fmt.Fprintf(m.b, "%s%s --> %s\n", indent, name[d], name[n.ID])
		}
	}
	for _, n := range g.Nodes {
		c := n.Child
		if c == nil {
			continue
		}
		fmt.Fprintf(m.b, "%ssubgraph %s_run[\"%s\"]\n", indent, name[n.ID], mermaidText(c.runLabel()))
		inner := m.nodes(c, indent+"  ")
		fmt.Fprintf(m.b, "%send\n", indent)
		for _, cn := range c.Nodes {
			if len(cn.DependsOn) == 0 {
				fmt.Fprintf(m.b, "%s%s -.-> %s\n", indent, name[n.ID], inner[cn.ID])
			}
		}
	}
	return name
}
