package client_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	svc "github.com/svc-dev/svc"
)

// fakeGroups serve the clienttest fixture (pair, split, slowpair) plus err,
// whose run fails as agent err does on the same task. Nodes are listed
// upstream first.
var fakeGroups = map[string]svc.Group{
	"pair": {Name: "pair", Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}},
		Edges: []svc.GroupEdge{{From: "a", To: "b"}}},
	"split": {Name: "split", Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}, {Name: "c", Agent: "echo"}},
		Edges: []svc.GroupEdge{{From: "a", To: "b"}, {From: "a", To: "c"}}},
	"slowpair": {Name: "slowpair", Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "slow"}},
		Edges: []svc.GroupEdge{{From: "a", To: "b"}}},
	"err": {Name: "err", Nodes: []svc.GroupNode{{Name: "a", Agent: "err"}}},
}

// groupRegistryError says what the runtime says of a name that is no group.
func groupRegistryError(name string) error {
	if slices.Contains(fakeAgents, name) {
		return &svc.Error{Kind: svc.KindRegistry, Message: fmt.Sprintf("unknown group %q: %s is an agent: POST /agents/%s/run (Run in Go)", name, name, name)}
	}
	return &svc.Error{Kind: svc.KindRegistry, Message: fmt.Sprintf("unknown group %q (registered groups: ...)", name)}
}

func (f *fakeBackend) Groups(context.Context) ([]string, error) {
	names := make([]string, 0, len(fakeGroups))
	for n := range fakeGroups {
		names = append(names, n)
	}
	slices.Sort(names)
	return names, nil
}

func (f *fakeBackend) GroupTopology(_ context.Context, name string) (svc.Topology, error) {
	g, ok := fakeGroups[name]
	if !ok {
		return svc.Topology{}, groupRegistryError(name)
	}
	return topologyOf(g), nil
}

// topologyOf derives what the runtime reports: entry nodes have no incoming
// edge, terminal nodes no outgoing one.
func topologyOf(g svc.Group) svc.Topology {
	t := svc.Topology{Name: g.Name, Kind: g.EffectiveKind(), Nodes: g.Nodes, Edges: g.Edges}
	var mm strings.Builder
	mm.WriteString("flowchart LR\n")
	for _, n := range g.Nodes {
		if !slices.ContainsFunc(g.Edges, func(e svc.GroupEdge) bool { return e.To == n.Name }) {
			t.Entry = append(t.Entry, n.Name)
		}
		if !slices.ContainsFunc(g.Edges, func(e svc.GroupEdge) bool { return e.From == n.Name }) {
			t.Terminal = append(t.Terminal, n.Name)
		}
		fmt.Fprintf(&mm, "  %s[\"%s: %s\"]\n", n.Name, n.Name, n.Agent)
	}
	for _, e := range g.Edges {
		fmt.Fprintf(&mm, "  %s --> %s\n", e.From, e.To)
	}
	t.Mermaid = mm.String()
	return t
}

// RunGroup runs the group's nodes in the order listed, each on its
// upstream's output or, for an entry node, on the task's input, and answers
// with the terminal nodes' results in the envelope the runtime uses. Every
// node runs under the group run's trace id.
func (f *fakeBackend) RunGroup(ctx context.Context, name string, task svc.TaskSpec) (svc.RunResult, error) {
	g, ok := fakeGroups[name]
	if !ok {
		return svc.RunResult{}, groupRegistryError(name)
	}
	if name == "err" {
		// The task whole, so the error names its id.
		_, err := f.Run(ctx, "err", task)
		return svc.RunResult{}, err
	}
	trace := task.RequestID
	if trace == "" {
		trace = svc.RequestIDFrom(ctx)
	}
	if trace == "" {
		trace = uuid.Must(uuid.NewV7()).String()
	}
	results := make(map[string]svc.AgentResult, len(g.Nodes))
	for _, n := range g.Nodes {
		input := task.Input
		if i := slices.IndexFunc(g.Edges, func(e svc.GroupEdge) bool { return e.To == n.Name }); i >= 0 {
			input = results[g.Edges[i].From].Output
		}
		res, err := f.Run(ctx, n.Agent, svc.TaskSpec{Input: input, RequestID: trace, Metadata: task.Metadata})
		if err != nil {
			return svc.RunResult{}, err
		}
		results[n.Name] = res
	}
	terminal := topologyOf(g).Terminal
	if len(terminal) == 1 {
		res := results[terminal[0]]
		return svc.RunResult{Agent: &res}, nil
	}
	out := &svc.GroupResult{Group: true, Outputs: map[string]svc.AgentResult{}, Success: true,
		Metadata: svc.GroupMetadata{TraceID: trace, GroupName: name, Invocations: len(g.Nodes), Backend: "local"}}
	for _, leaf := range terminal {
		out.Outputs[leaf] = results[leaf]
		out.Success = out.Success && results[leaf].Success
	}
	return svc.RunResult{Group: out}, nil
}
