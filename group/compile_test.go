package group_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
)

// nodes makes graph nodes running the agent of the same name.
func nodes(names ...string) []svc.GroupNode {
	out := make([]svc.GroupNode, len(names))
	for i, n := range names {
		out[i] = svc.GroupNode{Name: n, Agent: n}
	}
	return out
}

func edge(from, to string) svc.GroupEdge { return svc.GroupEdge{From: from, To: to} }

func TestCompileValidation(t *testing.T) {
	known := agents("a", "b", "c", "d", "x", "coord", "d1", "d2")
	graph := func(edges ...svc.GroupEdge) svc.Group {
		return svc.Group{Name: "g", Nodes: nodes("a", "b", "c"), Edges: edges}
	}
	team := func(mod func(*svc.Group)) svc.Group {
		g := svc.Group{Name: "g", Kind: svc.GroupTeam, Coordinator: "coord", Delegates: []string{"d1", "d2"}}
		mod(&g)
		return g
	}
	withEdge := func(e svc.GroupEdge) svc.Group { return graph(edge("a", "b"), e) }
	tests := []struct {
		name string
		g    svc.Group
		want []group.Error
	}{
		{"invalid group name", svc.Group{Name: "bad name", Nodes: nodes("a")},
			[]group.Error{{Key: "name", Msg: `"bad name" is not a valid group name: use letters, digits, '_', '-' and '.', starting with a letter or digit`}}},
		{"empty group name", svc.Group{Nodes: nodes("a")},
			[]group.Error{{Key: "name", Msg: `"" is not a valid group name: use letters, digits, '_', '-' and '.', starting with a letter or digit`}}},
		{"unknown kind", svc.Group{Name: "g", Kind: "dag", Nodes: nodes("a")},
			[]group.Error{{Key: "kind", Msg: `"dag": want graph or team`}}},
		{"graph without nodes", svc.Group{Name: "g"},
			[]group.Error{{Key: "nodes", Msg: "a graph needs at least one node"}}},
		{"invalid node name", svc.Group{Name: "g", Nodes: []svc.GroupNode{{Name: "-a", Agent: "a"}, {Name: "b", Agent: "b"}}, Edges: []svc.GroupEdge{edge("-a", "b")}},
			[]group.Error{{Key: "nodes.-a", Msg: `"-a" is not a valid node name: use letters, digits, '_', '-' and '.', starting with a letter or digit`}}},
		{"duplicate node", svc.Group{Name: "g", Nodes: []svc.GroupNode{{Name: "a", Agent: "a"}, {Name: "a", Agent: "b"}}},
			[]group.Error{{Key: "nodes.a", Msg: `node "a" is defined twice`}}},
		{"node without agent", svc.Group{Name: "g", Nodes: []svc.GroupNode{{Name: "a"}}},
			[]group.Error{{Key: "nodes.a.agent", Msg: "agent is required"}}},
		{"invalid agent name", svc.Group{Name: "g", Nodes: []svc.GroupNode{{Name: "a", Agent: "no/such"}}},
			[]group.Error{{Key: "nodes.a.agent", Msg: `"no/such" is not a valid agent name`}}},
		{"unknown agent", svc.Group{Name: "g", Nodes: []svc.GroupNode{{Name: "a", Agent: "ghost"}}},
			[]group.Error{{Key: "nodes.a.agent", Msg: `unknown agent "ghost"`}}},
		{"edge from unknown node", graph(edge("zz", "b")),
			[]group.Error{{Key: "edges[0].from", Msg: `unknown node "zz"`}}},
		{"edge to unknown node", graph(edge("a", "zz")),
			[]group.Error{{Key: "edges[0].to", Msg: `unknown node "zz"`}}},
		{"edge without from", graph(edge("", "b")),
			[]group.Error{{Key: "edges[0].from", Msg: "from is required"}}},
		{"edge without to", graph(edge("a", "")),
			[]group.Error{{Key: "edges[0].to", Msg: "to is required"}}},
		{"self-loop", graph(edge("a", "b"), edge("b", "b")),
			[]group.Error{{Key: "edges[1]", Msg: `self-loop on node "b"`}}},
		{"duplicate edge", graph(edge("a", "b"), edge("a", "c"), svc.GroupEdge{From: "a", To: "b", When: "true"}),
			[]group.Error{{Key: "edges[2]", Msg: "duplicate of edges[0] (a → b)"}}},
		{"cycle", svc.Group{Name: "g", Nodes: nodes("a", "b", "c", "d"), Edges: []svc.GroupEdge{edge("a", "b"), edge("b", "c"), edge("c", "b"), edge("c", "d")}},
			[]group.Error{{Key: "edges[2]", Msg: "cycle: b → c → b"}}},
		{"no entry node", svc.Group{Name: "g", Nodes: nodes("a", "b", "c"), Edges: []svc.GroupEdge{edge("a", "b"), edge("b", "a"), edge("b", "c")}},
			[]group.Error{
				{Key: "edges[1]", Msg: "cycle: a → b → a"},
				{Key: "", Msg: "no entry node: every node has an incoming edge"},
			}},
		{"no terminal node", svc.Group{Name: "g", Nodes: nodes("a", "b", "c"), Edges: []svc.GroupEdge{edge("c", "a"), edge("a", "b"), edge("b", "a")}},
			[]group.Error{
				{Key: "edges[2]", Msg: "cycle: a → b → a"},
				{Key: "", Msg: "no terminal node: every node has an outgoing edge"},
			}},
		{"fan-out feeding fan-out", graph(
			svc.GroupEdge{From: "a", To: "b", FanOut: "output.items"},
			svc.GroupEdge{From: "b", To: "c", FanOut: "output.parts"}),
			[]group.Error{{Key: "edges[1].fan_out", Msg: `fan-out feeding fan-out: node "b" already runs once per item of edges[0]`}}},
		{"max_concurrency negative", withEdge(svc.GroupEdge{From: "b", To: "c", FanOut: "output", MaxConcurrency: -1}),
			[]group.Error{{Key: "edges[1].max_concurrency", Msg: "-1: want 0 (the default, 100) to 10000"}}},
		{"max_concurrency too large", withEdge(svc.GroupEdge{From: "b", To: "c", FanOut: "output", MaxConcurrency: 10001}),
			[]group.Error{{Key: "edges[1].max_concurrency", Msg: "10001: want 0 (the default, 100) to 10000"}}},
		{"max_concurrency without fan_out", withEdge(svc.GroupEdge{From: "b", To: "c", MaxConcurrency: 5}),
			[]group.Error{{Key: "edges[1].max_concurrency", Msg: "set without fan_out"}}},
		{"when does not parse", withEdge(svc.GroupEdge{From: "b", To: "c", When: "output.category =="}),
			[]group.Error{{Key: "edges[1].when", Msg: "does not compile: 1:19: Syntax error: mismatched input '<EOF>' expecting ..."}}},
		{"when undeclared variable", withEdge(svc.GroupEdge{From: "b", To: "c", When: `result == "ok"`}),
			[]group.Error{{Key: "edges[1].when", Msg: "does not compile: 1:1: undeclared reference to 'result'"}}},
		{"when type error", withEdge(svc.GroupEdge{From: "b", To: "c", When: `metadata.tier == 1`}),
			[]group.Error{{Key: "edges[1].when", Msg: "does not compile: 1:15: found no matching overload for '_==_' applied to '(string, int)'"}}},
		{"when not bool", withEdge(svc.GroupEdge{From: "b", To: "c", When: `size(output)`}),
			[]group.Error{{Key: "edges[1].when", Msg: "gives int, want bool"}}},
		{"fan_out not a list", withEdge(svc.GroupEdge{From: "b", To: "c", FanOut: `"abc"`}),
			[]group.Error{{Key: "edges[1].fan_out", Msg: "gives string, want a list"}}},
		{"fan_out does not parse", withEdge(svc.GroupEdge{From: "b", To: "c", FanOut: `output.items[`}),
			[]group.Error{{Key: "edges[1].fan_out", Msg: "does not compile: 1:14: Syntax error: mismatched input '<EOF>' expecting ..."}}},
		{"input not a JSON value", withEdge(svc.GroupEdge{From: "b", To: "c", Input: `type(output)`}),
			[]group.Error{{Key: "edges[1].input", Msg: "gives type(dyn), want a JSON value"}}},
		{"input does not compile", withEdge(svc.GroupEdge{From: "b", To: "c", Input: `{"a": }`}),
			[]group.Error{{Key: "edges[1].input", Msg: "does not compile: 1:7: Syntax error: mismatched input '}' expecting ..."}}},
		{"item in when", withEdge(svc.GroupEdge{From: "b", To: "c", FanOut: "output", When: `item.ok`}),
			[]group.Error{{Key: "edges[1].when", Msg: "does not compile: 1:1: undeclared reference to 'item' (`item` is bound only in the input of a fan_out edge)"}}},
		{"item in fan_out", withEdge(svc.GroupEdge{From: "b", To: "c", FanOut: "item"}),
			[]group.Error{{Key: "edges[1].fan_out", Msg: "does not compile: 1:1: undeclared reference to 'item' (`item` is bound only in the input of a fan_out edge)"}}},
		{"item in input without fan_out", withEdge(svc.GroupEdge{From: "b", To: "c", Input: `{"x": item}`}),
			[]group.Error{{Key: "edges[1].input", Msg: "does not compile: 1:7: undeclared reference to 'item' (`item` is bound only in the input of a fan_out edge)"}}},
		{"expression too long", withEdge(svc.GroupEdge{From: "b", To: "c", When: "true" + strings.Repeat(" ", 16<<10)}),
			[]group.Error{{Key: "edges[1].when", Msg: "expression is 16388 bytes, more than the 16384 allowed"}}},
		{"graph with coordinator", svc.Group{Name: "g", Nodes: nodes("a"), Coordinator: "coord"},
			[]group.Error{{Key: "coordinator", Msg: "only a team has a coordinator"}}},
		{"graph with delegates", svc.Group{Name: "g", Nodes: nodes("a"), Delegates: []string{"d1"}},
			[]group.Error{{Key: "delegates", Msg: "only a team has delegates"}}},
		{"graph with max_rounds", svc.Group{Name: "g", Nodes: nodes("a"), MaxRounds: 2},
			[]group.Error{{Key: "max_rounds", Msg: "only a team has max_rounds"}}},
		{"team without coordinator", team(func(g *svc.Group) { g.Coordinator = "" }),
			[]group.Error{{Key: "coordinator", Msg: "coordinator is required"}}},
		{"team with unknown coordinator", team(func(g *svc.Group) { g.Coordinator = "ghost" }),
			[]group.Error{{Key: "coordinator", Msg: `unknown agent "ghost"`}}},
		{"team without delegates", team(func(g *svc.Group) { g.Delegates = nil }),
			[]group.Error{{Key: "delegates", Msg: "a team needs at least one delegate"}}},
		{"team with unknown delegate", team(func(g *svc.Group) { g.Delegates = []string{"d1", "ghost"} }),
			[]group.Error{{Key: "delegates[1]", Msg: `unknown agent "ghost"`}}},
		{"team with empty delegate", team(func(g *svc.Group) { g.Delegates = []string{""} }),
			[]group.Error{{Key: "delegates[0]", Msg: "agent is required"}}},
		{"team with duplicate delegate", team(func(g *svc.Group) { g.Delegates = []string{"d1", "d2", "d1"} }),
			[]group.Error{{Key: "delegates[2]", Msg: `"d1" is already delegates[0]`}}},
		{"team coordinator as delegate", team(func(g *svc.Group) { g.Delegates = []string{"d1", "coord"} }),
			[]group.Error{{Key: "delegates[1]", Msg: `"coord" is the coordinator; a coordinator cannot be its own delegate`}}},
		{"team with negative max_rounds", team(func(g *svc.Group) { g.MaxRounds = -1 }),
			[]group.Error{{Key: "max_rounds", Msg: "-1: want 0 (the default, 8) or more"}}},
		{"team with nodes", team(func(g *svc.Group) { g.Nodes = nodes("a") }),
			[]group.Error{{Key: "nodes", Msg: "a team has no nodes: it has a coordinator and delegates"}}},
		{"team with edges", team(func(g *svc.Group) { g.Edges = []svc.GroupEdge{edge("a", "b")} }),
			[]group.Error{{Key: "edges", Msg: "a team has no edges: the coordinator calls its delegates"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gr, err := group.Compile(tt.g, known)
			if err == nil {
				t.Fatalf("Compile succeeded, want %+v", tt.want)
			}
			if gr != nil {
				t.Error("Compile returned a graph with an error")
			}
			if got := problems(t, err); !matchProblems(got, tt.want) {
				t.Fatalf("errors:\n got %q\nwant %q", got, tt.want)
			}
			for _, sentinel := range []error{svc.ErrTopology, svc.ErrSpecValidation, svc.ErrRuntime} {
				if !errors.Is(err, sentinel) {
					t.Errorf("errors.Is(err, %v) = false", sentinel)
				}
			}
		})
	}
}

// matchProblems compares keys exactly and messages exactly, or by prefix
// when the wanted message ends in "..." (CEL's parser lists the tokens it
// expected, which changes with its grammar).
func matchProblems(got, want []group.Error) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].Key != want[i].Key {
			return false
		}
		if p, ok := strings.CutSuffix(want[i].Msg, "..."); ok {
			if !strings.HasPrefix(got[i].Msg, p) {
				return false
			}
		} else if got[i].Msg != want[i].Msg {
			return false
		}
	}
	return true
}

func TestCompileSkipsAgentChecksWithoutHasAgent(t *testing.T) {
	g := svc.Group{Name: "g", Nodes: []svc.GroupNode{{Name: "a", Agent: "anything"}}}
	if _, err := group.Compile(g, nil); err != nil {
		t.Fatalf("Compile(nil hasAgent): %v", err)
	}
	if _, err := group.Compile(group.Team("t", "c", []string{"d"}, 0), nil); err != nil {
		t.Fatalf("Compile(team, nil hasAgent): %v", err)
	}
	// A missing agent is still an error: it is not a lookup.
	g.Nodes[0].Agent = ""
	if _, err := group.Compile(g, nil); err == nil {
		t.Fatal("Compile accepted a node without an agent")
	}
}

// Every problem is reported, in definition order, not just the first.
func TestCompileReportsAllInOrder(t *testing.T) {
	g := svc.Group{
		Name:  "g",
		Nodes: []svc.GroupNode{{Name: "a", Agent: "ghost"}, {Name: "b", Agent: "b"}, {Name: "b", Agent: "b"}},
		Edges: []svc.GroupEdge{
			{From: "a", To: "zz", When: "true"},
			{From: "a", To: "b", When: "1 +"},
			{From: "a", To: "b", Input: "nope"},
		},
	}
	got := problems(t, func() error { _, err := group.Compile(g, agents("b")); return err }())
	var keys []string
	for _, p := range got {
		keys = append(keys, p.Key)
	}
	want := []string{"nodes.a.agent", "nodes.b", "edges[0].to", "edges[1].when", "edges[2]", "edges[2].input"}
	if !reflect.DeepEqual(keys, want) {
		t.Fatalf("keys = %q, want %q (errors %q)", keys, want, got)
	}
}

func TestCycleNaming(t *testing.T) {
	tests := []struct {
		name  string
		nodes []string
		edges []svc.GroupEdge
		want  []group.Error
	}{
		{"three nodes", []string{"start", "a", "b", "c", "end"},
			[]svc.GroupEdge{edge("start", "a"), edge("a", "b"), edge("b", "c"), edge("c", "a"), edge("c", "end")},
			[]group.Error{{Key: "edges[3]", Msg: "cycle: a → b → c → a"}}},
		{"named from the first-defined node", []string{"start", "c", "b", "a", "end"},
			[]svc.GroupEdge{edge("start", "a"), edge("a", "b"), edge("b", "c"), edge("c", "a"), edge("c", "end")},
			[]group.Error{{Key: "edges[2]", Msg: "cycle: c → a → b → c"}}},
		{"shortest way back", []string{"s", "a", "b", "c", "d", "e"},
			[]svc.GroupEdge{edge("s", "a"), edge("a", "b"), edge("b", "c"), edge("c", "d"), edge("d", "a"), edge("b", "a"), edge("d", "e")},
			[]group.Error{{Key: "edges[5]", Msg: "cycle: a → b → a"}}},
		{"two separate cycles", []string{"s", "a", "b", "c", "d", "e"},
			[]svc.GroupEdge{edge("s", "a"), edge("a", "b"), edge("b", "a"), edge("s", "c"), edge("c", "d"), edge("d", "c"), edge("d", "e"), edge("b", "e")},
			[]group.Error{{Key: "edges[2]", Msg: "cycle: a → b → a"}, {Key: "edges[5]", Msg: "cycle: c → d → c"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := group.Compile(svc.Group{Name: "g", Nodes: nodes(tt.nodes...), Edges: tt.edges}, nil)
			if got := problems(t, err); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("errors:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestCompileGraph(t *testing.T) {
	g := svc.Group{
		Name:  "g",
		Nodes: nodes("e", "d", "c", "b", "a", "solo"),
		Edges: []svc.GroupEdge{
			edge("e", "c"),
			{From: "d", To: "c", When: "true"},
			edge("c", "a"),
			edge("c", "b"),
			edge("d", "b"),
		},
	}
	gr, err := group.Compile(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"e", "d", "solo"}; !reflect.DeepEqual(gr.Entry, want) {
		t.Errorf("Entry = %q, want %q", gr.Entry, want)
	}
	if want := []string{"b", "a", "solo"}; !reflect.DeepEqual(gr.Terminal, want) {
		t.Errorf("Terminal = %q, want %q", gr.Terminal, want)
	}
	if want := []string{"e", "d", "c", "b", "a", "solo"}; !reflect.DeepEqual(gr.Order, want) {
		t.Errorf("Order = %q, want %q", gr.Order, want)
	}
	c := gr.Nodes["c"]
	if c.Name != "c" || c.Agent != "c" || len(c.In) != 2 || len(c.Out) != 2 {
		t.Fatalf("node c = %+v", c)
	}
	if c.In[0].Index != 0 || c.In[1].Index != 1 || c.Out[0].To != "a" || c.Out[1].To != "b" {
		t.Errorf("node c edges out of definition order: in %d,%d out %s,%s", c.In[0].Index, c.In[1].Index, c.Out[0].To, c.Out[1].To)
	}
	if c.In[1].When != "true" || c.In[1] != gr.Nodes["d"].Out[0] {
		t.Error("an edge is not shared by its two nodes")
	}
	// Def is a copy.
	g.Nodes[0].Agent = "changed"
	if gr.Def.Nodes[0].Agent != "e" {
		t.Error("Graph.Def aliases the caller's group")
	}
}

// Order is topological and prefers definition order among ready nodes.
func TestCompileOrderIsTopological(t *testing.T) {
	g := svc.Group{
		Name:  "g",
		Nodes: nodes("z", "y", "x", "w"),
		Edges: []svc.GroupEdge{edge("w", "z"), edge("x", "y"), edge("y", "z")},
	}
	gr, err := group.Compile(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"x", "y", "w", "z"}; !reflect.DeepEqual(gr.Order, want) {
		t.Fatalf("Order = %q, want %q", gr.Order, want)
	}
}

func TestCompileTeam(t *testing.T) {
	gr, err := group.Compile(group.Team("desk", "editor", []string{"r", "w"}, 0), agents("editor", "r", "w"))
	if err != nil {
		t.Fatal(err)
	}
	if len(gr.Nodes) != 0 || gr.Entry != nil || gr.Terminal != nil || gr.Order != nil {
		t.Errorf("team graph has graph parts: %+v", gr)
	}
	if gr.Def.Coordinator != "editor" || !reflect.DeepEqual(gr.Def.Delegates, []string{"r", "w"}) {
		t.Errorf("team Def = %+v", gr.Def)
	}
}

func TestErrorKindAndText(t *testing.T) {
	e := &group.Error{Group: "support", Key: "edges[2].when", Msg: "boom"}
	if got, want := e.Error(), "group support: edges[2].when: boom"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	whole := &group.Error{Group: "support", Msg: "no entry node"}
	if got, want := whole.Error(), "group support: no entry node"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	bad := &group.Error{Group: "bad name", Key: "name", Msg: "invalid"}
	if got, want := bad.Error(), `group "bad name": name: invalid`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	for _, s := range []error{svc.ErrTopology, svc.ErrSpecValidation, svc.ErrRuntime} {
		if !errors.Is(e, s) {
			t.Errorf("errors.Is(*Error, %v) = false", s)
		}
	}
	for _, s := range []error{svc.ErrRegistry, svc.ErrTimeout, errors.New("other")} {
		if errors.Is(e, s) {
			t.Errorf("errors.Is(*Error, %v) = true", s)
		}
	}
	// The kind reaches code that reads *svc.Error, through a join too.
	_, err := group.Compile(svc.Group{Name: "g"}, nil)
	if k := svc.KindOf(err); k != svc.KindTopology {
		t.Errorf("KindOf(Compile error) = %q, want %q", k, svc.KindTopology)
	}
	var se *svc.Error
	if !errors.As(err, &se) || se.Kind != svc.KindTopology || se.Message != "group g: nodes: a graph needs at least one node" {
		t.Errorf("errors.As(*svc.Error) = %+v", se)
	}
}
