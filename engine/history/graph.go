package history

import (
	"fmt"
	"io"
	"maps"
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
	// Cache is set for a step with cache:; CachedFrom names the task run
	// whose result it took from the cache, in the graph's task.
	Cache      bool
	CachedFrom string
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
	// A foreach or matrix step is drawn as its instances, as a run makes them.
	vars := maps.Clone(p.Vars)
	maps.Copy(vars, o.Vars)
	if p, err = p.Expand(vars); err != nil {
		return nil, err
	}
	g := &Graph{TaskName: p.TaskName, TaskID: o.TaskID}
	states := map[string]string{}
	cachedFrom := map[string]string{}
	if o.TaskID != "" {
		if err := statedir.ValidTaskID(o.TaskID); err != nil {
			return nil, usage.Errorf("--task-id: %v", err)
		}
		logPath, _, err := h.Dir.FindLog(o.TaskID)
		if err != nil {
			return nil, err
		}
		if logPath != "" {
			g.Log = logPath
			state, _, err := statedir.Replay(logPath, o.TaskID, nil)
			if err != nil {
				return nil, err
			}
			_, held := eventlog.Holder(h.Dir.Lock(o.TaskID))
			for id, st := range state.Steps {
				states[id] = st.Status
				if st.Status == eventlog.Success && st.CachedFrom != "" {
					cachedFrom[id] = st.CachedFrom
				}
				if st.Dirty && !held {
					states[id] = StateDirty
				}
			}
		}
	}
	for _, i := range p.TopoOrder() {
		s := p.Steps[i]
		n := GraphNode{ID: s.ID, DependsOn: s.DependsOn, Optional: s.Optional, Cache: s.Cache != nil, CachedFrom: cachedFrom[s.ID]}
		if o.TaskID != "" {
			n.State = eventlog.Pending
			if st, ok := states[s.ID]; ok && st != "" {
				n.State = st
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
// dot -Tsvg > dag.svg`. Optional steps have a dashed border.
func WriteDOT(w io.Writer, g *Graph) error {
	var b strings.Builder
	fmt.Fprintf(&b, "digraph %s {\n", dotQuote(g.TaskName))
	fmt.Fprintf(&b, "  graph [rankdir=LR, label=%s, labelloc=t, fontname=\"Helvetica\"];\n", dotQuote(g.title()))
	b.WriteString("  node [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", fontname=\"Helvetica\"];\n")
	b.WriteString("  edge [color=\"#616161\"];\n")
	for _, n := range g.Nodes {
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
		fmt.Fprintf(&b, "  %s [%s];\n", dotQuote(n.ID), strings.Join(attrs, ", "))
	}
	for _, n := range g.Nodes {
		for _, d := range n.DependsOn {
			fmt.Fprintf(&b, "  %s -> %s;\n", dotQuote(d), dotQuote(n.ID))
		}
	}
	b.WriteString("}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// mermaidText escapes s for a quoted Mermaid label.
func mermaidText(s string) string {
	return strings.NewReplacer(`"`, "#quot;", "<", "#lt;", ">", "#gt;").Replace(s)
}

// WriteMermaid prints g as a Mermaid flowchart, for Markdown that GitHub
// and GitLab render. Nodes are named s0, s1, … (a step id such as "end"
// would be a Mermaid keyword); optional steps are drawn as stadiums.
func WriteMermaid(w io.Writer, g *Graph) error {
	var b strings.Builder
	fmt.Fprintf(&b, "---\ntitle: %s\n---\nflowchart LR\n", g.title())
	name := map[string]string{}
	for i, n := range g.Nodes {
		name[n.ID] = fmt.Sprintf("s%d", i)
	}
	for _, n := range g.Nodes {
		label := mermaidText(n.ID)
		if n.State != "" {
			label += "<br/>" + n.State
		}
		if note := n.note(); note != "" {
			label += "<br/>" + mermaidText(note)
		}
		open, close := "[", "]"
		if n.Optional {
			open, close = "([", "])"
		}
		fmt.Fprintf(&b, "  %s%s\"%s\"%s\n", name[n.ID], open, label, close)
	}
	for _, n := range g.Nodes {
		for _, d := range n.DependsOn {
			fmt.Fprintf(&b, "  %s --> %s\n", name[d], name[n.ID])
		}
	}
	for _, st := range graphStates {
		var members []string
		for _, n := range g.Nodes {
			if n.State == st {
				members = append(members, name[n.ID])
			}
		}
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
