package group

import (
	"slices"

	"github.com/svc-dev/svc"
)

// Builder assembles a graph group in Go:
//
//	g, err := group.New("support").
//		Node("triage", "triage").
//		Node("billing", "billing_expert").
//		Edge("triage", "billing", group.When(`output.category == "billing"`)).
//		Build()
//
// A Builder is not safe for concurrent use. Mistakes are reported by Build,
// all at once.
type Builder struct {
	g svc.Group
}

// New starts a graph group called name.
func New(name string) *Builder {
	return &Builder{g: svc.Group{Name: name, Kind: svc.GroupGraph}}
}

// Node adds a node called name that runs agent.
func (b *Builder) Node(name, agent string) *Builder {
	b.g.Nodes = append(b.g.Nodes, svc.GroupNode{Name: name, Agent: agent})
	return b
}

// EdgeOption sets an optional part of an edge.
type EdgeOption func(*svc.GroupEdge)

// When makes the edge fire only when expr, a CEL expression giving a bool,
// is true.
func When(expr string) EdgeOption {
	return func(e *svc.GroupEdge) { e.When = expr }
}

// Input builds the downstream input with expr, a CEL expression, instead of
// passing the upstream output on. On a fan-out edge expr also sees `item`.
func Input(expr string) EdgeOption {
	return func(e *svc.GroupEdge) { e.Input = expr }
}

// FanOut runs the target once per item of listExpr, a CEL expression giving
// a list, with at most maxConcurrency items in flight (0 means
// svc.DefaultGatherConcurrency).
func FanOut(listExpr string, maxConcurrency int) EdgeOption {
	return func(e *svc.GroupEdge) {
		e.FanOut = listExpr
		e.MaxConcurrency = maxConcurrency
	}
}

// Edge adds an edge from one node to another.
func (b *Builder) Edge(from, to string, opts ...EdgeOption) *Builder {
	e := svc.GroupEdge{From: from, To: to}
	for _, o := range opts {
		o(&e)
	}
	b.g.Edges = append(b.g.Edges, e)
	return b
}

// Build checks the group as Compile does without knowing the registered
// agents, and returns a copy of it. On error the group is the zero value
// and the error joins every *Error found.
func (b *Builder) Build() (svc.Group, error) {
	if _, err := Compile(b.g, nil); err != nil {
		return svc.Group{}, err
	}
	return b.g.Clone(), nil
}

// Team returns a team group: coordinator calls the delegates through a
// generated delegate tool, at most maxRounds times (0 means
// svc.DefaultMaxRounds). It is plain data; Compile checks it.
func Team(name, coordinator string, delegates []string, maxRounds int) svc.Group {
	return svc.Group{
		Name:        name,
		Kind:        svc.GroupTeam,
		Coordinator: coordinator,
		Delegates:   slices.Clone(delegates),
		MaxRounds:   maxRounds,
	}
}
