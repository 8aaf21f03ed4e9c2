package group_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/group"
)

func TestBuilder(t *testing.T) {
	b := group.New("support").
		Node("triage", "triage").
		Node("billing", "billing_expert").
		Node("split", "splitter").
		Node("work", "worker").
		Edge("triage", "billing", group.When(`output.category == "billing"`), group.Input(`output.ticket`)).
		Edge("triage", "split").
		Edge("split", "work", group.FanOut(`output.items`, 4), group.Input(`{"item": item}`))
	got, err := b.Build()
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := svc.Group{
		Name: "support",
		Kind: svc.GroupGraph,
		Nodes: []svc.GroupNode{
			{Name: "triage", Agent: "triage"},
			{Name: "billing", Agent: "billing_expert"},
			{Name: "split", Agent: "splitter"},
			{Name: "work", Agent: "worker"},
		},
		Edges: []svc.GroupEdge{
			{From: "triage", To: "billing", When: `output.category == "billing"`, Input: `output.ticket`},
			{From: "triage", To: "split"},
			{From: "split", To: "work", FanOut: `output.items`, MaxConcurrency: 4, Input: `{"item": item}`},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Build =\n%+v\nwant\n%+v", got, want)
	}

	// The result is a copy: building on does not change it.
	b.Node("late", "late").Edge("work", "late")
	if len(got.Nodes) != 4 || len(got.Edges) != 3 {
		t.Fatalf("Build result changed by later builder calls: %+v", got)
	}
}

func TestBuilderError(t *testing.T) {
	got, err := group.New("g").
		Node("a", "x").
		Edge("a", "ghost").
		Edge("a", "a").
		Build()
	if !reflect.DeepEqual(got, svc.Group{}) {
		t.Errorf("Build on error returned %+v, want the zero group", got)
	}
	want := []group.Error{
		{Key: "edges[0].to", Msg: `unknown node "ghost"`},
		{Key: "edges[1]", Msg: `self-loop on node "a"`},
	}
	if p := problems(t, err); !reflect.DeepEqual(p, want) {
		t.Fatalf("Build errors = %+v, want %+v", p, want)
	}
	if !errors.Is(err, svc.ErrTopology) {
		t.Errorf("Build error is not a TopologyError: %v", err)
	}
}

func TestTeam(t *testing.T) {
	delegates := []string{"researcher", "writer"}
	g := group.Team("desk", "editor", delegates, 3)
	want := svc.Group{Name: "desk", Kind: svc.GroupTeam, Coordinator: "editor", Delegates: []string{"researcher", "writer"}, MaxRounds: 3}
	if !reflect.DeepEqual(g, want) {
		t.Fatalf("Team = %+v, want %+v", g, want)
	}
	delegates[0] = "changed"
	if g.Delegates[0] != "researcher" {
		t.Error("Team kept the caller's delegates slice")
	}
	if _, err := group.Compile(g, agents("editor", "researcher", "writer")); err != nil {
		t.Fatalf("Compile(team): %v", err)
	}
}
