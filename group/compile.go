// Package group is the group topology: a directed graph of agent nodes whose
// edges carry CEL conditions, input expressions and fan-outs, or a team of a
// coordinator and its delegates. It builds groups in Go (Builder, Team),
// validates them and compiles their expressions once (Compile), evaluates
// edges for a run (Edge.Fires, Edge.Items, Edge.BuildInput) and describes
// them (Graph.Topology, Mermaid). Running a graph is the runtime's job; this
// package only says what is connected to what, and how.
package group

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/svc-dev/svc"
)

// MaxConcurrencyLimit is the largest max_concurrency a fan-out edge may ask
// for.
const MaxConcurrencyLimit = 10000

// Edge is a compiled edge: the definition, its position in Def.Edges, and
// its expressions compiled once. Its methods are safe for concurrent use.
type Edge struct {
	svc.GroupEdge
	Index int // position in Def.Edges

	group               string
	when, fanOut, input *expr
}

// Node is a compiled node with its incoming and outgoing edges, each in
// definition order.
type Node struct {
	Name, Agent string
	In, Out     []*Edge
}

// Graph is a validated group with its expressions compiled. It is
// read-only once built and safe for concurrent use. For a team, Nodes is
// empty and Order, Entry and Terminal are nil: Def holds the coordinator
// and delegates.
type Graph struct {
	Def      svc.Group        // a Clone of the definition
	Nodes    map[string]*Node // by name
	Order    []string         // a topological order, definition order among ties
	Entry    []string         // nodes without incoming edges, definition order
	Terminal []string         // nodes without outgoing edges, definition order
}

// Compile validates g and compiles its expressions. hasAgent reports
// whether an agent is registered; nil skips the agent checks (for a group
// checked before its agents exist). The error joins one *Error per problem
// found, in definition order.
func Compile(g svc.Group, hasAgent func(name string) bool) (*Graph, error) {
	c := &compiler{def: g.Clone(), hasAgent: hasAgent}
	gr := c.compile()
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return gr, nil
}

type compiler struct {
	def      svc.Group
	hasAgent func(string) bool
	errs     []error
}

func (c *compiler) fail(key, format string, args ...any) {
	c.errs = append(c.errs, errorf(c.def.Name, key, format, args...))
}

func (c *compiler) compile() *Graph {
	g := &c.def
	if !svc.ValidName(g.Name) {
		c.fail("name", "%q is not a valid group name: use letters, digits, '_', '-' and '.', starting with a letter or digit", g.Name)
	}
	switch g.EffectiveKind() {
	case svc.GroupGraph:
		return c.graph()
	case svc.GroupTeam:
		c.team()
		return &Graph{Def: c.def, Nodes: map[string]*Node{}}
	default:
		c.fail("kind", "%q: want %s or %s", g.Kind, svc.GroupGraph, svc.GroupTeam)
		return nil
	}
}

// checkAgent reports a problem with an agent reference, or "".
func (c *compiler) checkAgent(agent string) string {
	switch {
	case agent == "":
		return "agent is required"
	case !svc.ValidName(agent):
		return fmt.Sprintf("%q is not a valid agent name", agent)
	case c.hasAgent != nil && !c.hasAgent(agent):
		return fmt.Sprintf("unknown agent %q", agent)
	}
	return ""
}

func (c *compiler) team() {
	g := &c.def
	if len(g.Nodes) > 0 {
		c.fail("nodes", "a team has no nodes: it has a coordinator and delegates")
	}
	if len(g.Edges) > 0 {
		c.fail("edges", "a team has no edges: the coordinator calls its delegates")
	}
	if msg := c.checkAgent(g.Coordinator); msg != "" {
		c.fail("coordinator", "%s", strings.Replace(msg, "agent is required", "coordinator is required", 1))
	}
	if len(g.Delegates) == 0 {
		c.fail("delegates", "a team needs at least one delegate")
	}
	seen := make(map[string]int, len(g.Delegates))
	for i, d := range g.Delegates {
		key := fmt.Sprintf("delegates[%d]", i)
		if msg := c.checkAgent(d); msg != "" {
			c.fail(key, "%s", msg)
			continue
		}
		if j, dup := seen[d]; dup {
			c.fail(key, "%q is already delegates[%d]", d, j)
			continue
		}
		seen[d] = i
		if d == g.Coordinator {
			c.fail(key, "%q is the coordinator; a coordinator cannot be its own delegate", d)
		}
	}
	if g.MaxRounds < 0 {
		c.fail("max_rounds", "%d: want 0 (the default, %d) or more", g.MaxRounds, svc.DefaultMaxRounds)
	}
}

func (c *compiler) graph() *Graph {
	def := &c.def
	if def.Coordinator != "" {
		c.fail("coordinator", "only a team has a coordinator")
	}
	if len(def.Delegates) > 0 {
		c.fail("delegates", "only a team has delegates")
	}
	if def.MaxRounds != 0 {
		c.fail("max_rounds", "only a team has max_rounds")
	}
	if len(def.Nodes) == 0 {
		c.fail("nodes", "a graph needs at least one node")
	}

	gr := &Graph{Def: c.def, Nodes: make(map[string]*Node, len(def.Nodes))}
	index := make(map[string]int, len(def.Nodes)) // node name -> definition position
	names := make([]string, 0, len(def.Nodes))    // the valid nodes, definition order
	// Nodes with a bad name are left out of the graph; edges naming them
	// are skipped rather than reported again as unknown nodes.
	badNames := map[string]bool{}
	for i, n := range def.Nodes {
		key := "nodes." + n.Name
		if !svc.ValidName(n.Name) {
			c.fail(key, "%q is not a valid node name: use letters, digits, '_', '-' and '.', starting with a letter or digit", n.Name)
			badNames[n.Name] = true
			continue
		}
		if _, dup := gr.Nodes[n.Name]; dup {
			c.fail(key, "node %q is defined twice", n.Name)
			continue
		}
		if msg := c.checkAgent(n.Agent); msg != "" {
			c.fail(key+".agent", "%s", msg)
		}
		gr.Nodes[n.Name] = &Node{Name: n.Name, Agent: n.Agent}
		index[n.Name] = i
		names = append(names, n.Name)
	}

	// Nodes that run once per item: the targets of fan-out edges. Known up
	// front so "fan-out feeding fan-out" is reported at the edge, in order.
	fanTargets := map[string]int{}
	for i, e := range def.Edges {
		if e.FanOut != "" {
			if _, ok := fanTargets[e.To]; !ok {
				fanTargets[e.To] = i
			}
		}
	}

	pairs := map[[2]string]int{}
	for i, ed := range def.Edges {
		key := fmt.Sprintf("edges[%d]", i)
		e := &Edge{GroupEdge: ed, Index: i, group: def.Name}
		ok := true
		for _, end := range []struct{ field, name string }{{"from", ed.From}, {"to", ed.To}} {
			switch _, known := gr.Nodes[end.name]; {
			case end.name == "":
				c.fail(key+"."+end.field, "%s is required", end.field)
				ok = false
			case badNames[end.name]:
				ok = false
			case !known:
				c.fail(key+"."+end.field, "unknown node %q", end.name)
				ok = false
			}
		}
		if ok && ed.From == ed.To {
			c.fail(key, "self-loop on node %q", ed.From)
			ok = false
		}
		if ok {
			p := [2]string{ed.From, ed.To}
			if j, dup := pairs[p]; dup {
				c.fail(key, "duplicate of edges[%d] (%s → %s)", j, ed.From, ed.To)
				ok = false
			} else {
				pairs[p] = i
			}
		}
		switch {
		case ed.MaxConcurrency < 0 || ed.MaxConcurrency > MaxConcurrencyLimit:
			c.fail(key+".max_concurrency", "%d: want 0 (the default, %d) to %d", ed.MaxConcurrency, svc.DefaultGatherConcurrency, MaxConcurrencyLimit)
		case ed.MaxConcurrency != 0 && ed.FanOut == "":
			c.fail(key+".max_concurrency", "set without fan_out")
		}
		if ed.FanOut != "" {
			if j, fed := fanTargets[ed.From]; fed {
				c.fail(key+".fan_out", "fan-out feeding fan-out: node %q already runs once per item of edges[%d]", ed.From, j)
			}
		}
		e.when = c.expr(key, ed.When, exprWhen, ed.FanOut != "")
		e.fanOut = c.expr(key, ed.FanOut, exprFanOut, ed.FanOut != "")
		e.input = c.expr(key, ed.Input, exprInput, ed.FanOut != "")
		if ok {
			gr.Nodes[ed.From].Out = append(gr.Nodes[ed.From].Out, e)
			gr.Nodes[ed.To].In = append(gr.Nodes[ed.To].In, e)
		}
	}

	// Structure, over the nodes and edges that passed the checks above.
	c.cycles(gr, names, index)
	for _, n := range names {
		if len(gr.Nodes[n].In) == 0 {
			gr.Entry = append(gr.Entry, n)
		}
		if len(gr.Nodes[n].Out) == 0 {
			gr.Terminal = append(gr.Terminal, n)
		}
	}
	if len(names) > 0 && len(gr.Entry) == 0 {
		c.fail("", "no entry node: every node has an incoming edge")
	}
	if len(names) > 0 && len(gr.Terminal) == 0 {
		c.fail("", "no terminal node: every node has an outgoing edge")
	}
	gr.Order = topoOrder(gr, names, index)
	return gr
}

// expr compiles one expression of an edge, reporting it under key.field.
func (c *compiler) expr(key, text string, k exprKind, fanOut bool) *expr {
	if text == "" {
		return nil
	}
	x, msg := compileExpr(text, k, fanOut)
	if msg != "" {
		c.fail(key+"."+k.field(), "%s", msg)
		return nil
	}
	return x
}

// cycles reports one cycle per strongly connected component with more than
// one node (self-loops are reported per edge), naming it from the
// component's first node in definition order along a shortest path back,
// and keyed by the edge that closes it.
func (c *compiler) cycles(gr *Graph, names []string, index map[string]int) {
	comp := scc(gr, names)
	for _, members := range comp {
		if len(members) < 2 {
			continue
		}
		in := make(map[string]bool, len(members))
		for _, m := range members {
			in[m] = true
		}
		start := members[0]
		for _, m := range members {
			if index[m] < index[start] {
				start = m
			}
		}
		// Breadth-first from start within the component, edges in
		// definition order, until an edge leads back to start.
		via := map[string]*Edge{}
		queue := []string{start}
		var closing *Edge
		for len(queue) > 0 && closing == nil {
			n := queue[0]
			queue = queue[1:]
			for _, e := range gr.Nodes[n].Out {
				if !in[e.To] {
					continue
				}
				if e.To == start {
					closing = e
					break
				}
				if _, seen := via[e.To]; !seen {
					via[e.To] = e
					queue = append(queue, e.To)
				}
			}
		}
		path := []string{start}
		for n := closing.From; n != start; n = via[n].From {
			path = append(path, n)
		}
		slices.Reverse(path[1:])
		path = append(path, start)
		c.fail(fmt.Sprintf("edges[%d]", closing.Index), "cycle: %s", strings.Join(path, " → "))
	}
}

// scc returns the strongly connected components of the graph (Tarjan),
// ordered by their earliest node in names.
func scc(gr *Graph, names []string) [][]string {
	idx := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	next := 0
	var visit func(string)
	visit = func(v string) {
		idx[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		for _, e := range gr.Nodes[v].Out {
			w := e.To
			if _, seen := idx[w]; !seen {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if onStack[w] {
				low[v] = min(low[v], idx[w])
			}
		}
		if low[v] == idx[v] {
			var comp []string
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				comp = append(comp, w)
				if w == v {
					break
				}
			}
			out = append(out, comp)
		}
	}
	for _, n := range names {
		if _, seen := idx[n]; !seen {
			visit(n)
		}
	}
	pos := make(map[string]int, len(names))
	for i, n := range names {
		pos[n] = i
	}
	first := func(comp []string) int {
		m := len(names)
		for _, n := range comp {
			m = min(m, pos[n])
		}
		return m
	}
	slices.SortFunc(out, func(a, b []string) int { return first(a) - first(b) })
	return out
}

// topoOrder is Kahn's algorithm taking the earliest-defined ready node
// each step, so the order is stable and reads like the definition. Nodes
// on a cycle are left out (the graph is then invalid anyway).
func topoOrder(gr *Graph, names []string, index map[string]int) []string {
	indeg := make(map[string]int, len(names))
	var ready []string
	for _, n := range names {
		indeg[n] = len(gr.Nodes[n].In)
		if indeg[n] == 0 {
			ready = append(ready, n)
		}
	}
	order := make([]string, 0, len(names))
	for len(ready) > 0 {
		n := ready[0]
		ready = ready[1:]
		order = append(order, n)
		for _, e := range gr.Nodes[n].Out {
			indeg[e.To]--
			if indeg[e.To] == 0 {
				// Insert keeping ready sorted by definition position.
				at, _ := slices.BinarySearchFunc(ready, e.To, func(a, b string) int { return index[a] - index[b] })
				ready = slices.Insert(ready, at, e.To)
			}
		}
	}
	return order
}
