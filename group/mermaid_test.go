package group_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
)

func TestMermaidGraph(t *testing.T) {
	g := svc.Group{
		Name: "support",
		Nodes: []svc.GroupNode{
			{Name: "triage", Agent: "triage"},
			{Name: "billing", Agent: "billing_expert"},
			{Name: "split", Agent: "splitter"},
			{Name: "work.item", Agent: "worker"},
			{Name: "end", Agent: "summariser"},
		},
		Edges: []svc.GroupEdge{
			{From: "triage", To: "billing", When: `output.category == "billing"`},
			{From: "triage", To: "split", Input: `output.ticket`},
			{From: "split", To: "work.item", FanOut: `output.items`, MaxConcurrency: 4},
			{From: "work.item", To: "end", When: "output.a || output.n < 3 &&\n  output.tag != \"#x`\""},
		},
	}
	want := `flowchart TD
    n_triage["triage (triage)"]
    n_billing["billing (billing_expert)"]
    n_split["split (splitter)"]
    n_work_item["work.item (worker)"]
    n_end["end (summariser)"]
    n_triage -->|"output.category == #quot;billing#quot;"| n_billing
    n_triage --> n_split
    n_split ==>|"fan_out: output.items"| n_work_item
    n_work_item -->|"output.a #124;#124; output.n #lt; 3 #amp;#amp;   output.tag != #quot;#35;x#96;#quot;"| n_end
`
	if got := group.Mermaid(g); got != want {
		t.Fatalf("Mermaid =\n%s\nwant\n%s", got, want)
	}
}

func TestMermaidConditionalFanOut(t *testing.T) {
	g := svc.Group{
		Name:  "g",
		Nodes: nodes("a", "b"),
		Edges: []svc.GroupEdge{{From: "a", To: "b", When: "output.ok", FanOut: "output.items"}},
	}
	want := `flowchart TD
    n_a["a (a)"]
    n_b["b (b)"]
    n_a ==>|"output.ok; fan_out: output.items"| n_b
`
	if got := group.Mermaid(g); got != want {
		t.Fatalf("Mermaid =\n%s\nwant\n%s", got, want)
	}
}

// Names that sanitise to the same id get distinct ids; ids never start
// with a digit or spell a Mermaid keyword.
func TestMermaidIDs(t *testing.T) {
	g := svc.Group{
		Name:  "g",
		Nodes: []svc.GroupNode{{Name: "a.b", Agent: "x"}, {Name: "a_b", Agent: "y"}, {Name: "a-b", Agent: "z"}, {Name: "1st", Agent: "w"}},
		Edges: []svc.GroupEdge{{From: "a.b", To: "a_b"}, {From: "a-b", To: "1st"}, {From: "1st", To: "ghost"}},
	}
	want := `flowchart TD
    n_a_b["a.b (x)"]
    n_a_b_2["a_b (y)"]
    n_a_b_3["a-b (z)"]
    n_1st["1st (w)"]
    n_a_b --> n_a_b_2
    n_a_b_3 --> n_1st
    n_1st --> n_ghost
`
	if got := group.Mermaid(g); got != want {
		t.Fatalf("Mermaid =\n%s\nwant\n%s", got, want)
	}
	for i := 0; i < 20; i++ { // map iteration order must not leak into the text
		if again := group.Mermaid(g); again != want {
			t.Fatalf("Mermaid is not deterministic:\n%s", again)
		}
	}
}

func TestMermaidTeam(t *testing.T) {
	g := group.Team("desk", "editor", []string{"researcher", "fact.checker"}, 0)
	want := `flowchart TD
    n_editor["editor (coordinator)"]
    n_researcher["researcher"]
    n_fact_checker["fact.checker"]
    n_editor -->|"delegate"| n_researcher
    n_editor -->|"delegate"| n_fact_checker
`
	if got := group.Mermaid(g); got != want {
		t.Fatalf("Mermaid =\n%s\nwant\n%s", got, want)
	}
}

func TestTopologyGraph(t *testing.T) {
	g := svc.Group{
		Name:  "pipe",
		Nodes: nodes("a", "b", "c", "d"),
		Edges: []svc.GroupEdge{
			{From: "a", To: "b", When: `output.go`},
			{From: "a", To: "c", FanOut: `output.items`, MaxConcurrency: 2},
		},
	}
	gr, err := group.Compile(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := gr.Topology()
	want := svc.Topology{
		Name:     "pipe",
		Kind:     svc.GroupGraph,
		Nodes:    g.Nodes,
		Edges:    g.Edges,
		Entry:    []string{"a", "d"},
		Terminal: []string{"b", "c", "d"},
		Mermaid:  group.Mermaid(g),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Topology =\n%+v\nwant\n%+v", got, want)
	}
	got.Nodes[0].Agent = "changed"
	if gr.Def.Nodes[0].Agent != "a" {
		t.Error("Topology aliases the graph's definition")
	}
}

// Lists marshal as [] even when empty, as clients expect arrays.
func TestTopologyJSON(t *testing.T) {
	gr, err := group.Compile(svc.Group{Name: "one", Nodes: nodes("a")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(gr.Topology())
	if err != nil {
		t.Fatal(err)
	}
	want := `{"name":"one","kind":"graph","nodes":[{"name":"a","agent":"a"}],"edges":[],"entry":["a"],"terminal":["a"],"mermaid":"flowchart TD\n    n_a[\"a (a)\"]\n"}`
	if string(b) != want {
		t.Fatalf("Topology JSON =\n%s\nwant\n%s", b, want)
	}
}

func TestTopologyTeam(t *testing.T) {
	g := group.Team("desk", "editor", []string{"r", "w"}, 0)
	gr, err := group.Compile(g, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := gr.Topology()
	want := svc.Topology{
		Name:        "desk",
		Kind:        svc.GroupTeam,
		Nodes:       []svc.GroupNode{},
		Edges:       []svc.GroupEdge{},
		Entry:       []string{"editor"},
		Terminal:    []string{"editor"},
		Coordinator: "editor",
		Delegates:   []string{"r", "w"},
		MaxRounds:   svc.DefaultMaxRounds,
		Mermaid:     group.Mermaid(g),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Topology =\n%+v\nwant\n%+v", got, want)
	}
}
