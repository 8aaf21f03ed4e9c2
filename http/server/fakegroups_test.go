package server_test

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	svc "github.com/svc-dev/svc"
)

// fakeGroups are the groups of fakeBackend, each listing its nodes upstream
// first:
//
//	pair   a: echo → b: echo                    one terminal: an AgentResult
//	split  a: echo → b: echo, a → c: echo       two terminals: a GroupResult
//	err    an *svc.Error whose kind is the input (a JSON string)
//	empty  a RunResult with neither envelope (a backend bug)
//	both   a RunResult with both envelopes (a backend bug)
var fakeGroups = map[string]svc.Group{
	"pair": {Name: "pair", Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}},
		Edges: []svc.GroupEdge{{From: "a", To: "b"}}},
	"split": {Name: "split", Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}, {Name: "c", Agent: "echo"}},
		Edges: []svc.GroupEdge{{From: "a", To: "b", When: `output != ""`}, {From: "a", To: "c"}}},
	"err":   {Name: "err", Nodes: []svc.GroupNode{{Name: "a", Agent: "err"}}},
	"empty": {Name: "empty", Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}}},
	"both":  {Name: "both", Nodes: []svc.GroupNode{{Name: "a", Agent: "echo"}}},
}

func groupRegistryError(name string) error {
	return &svc.Error{Kind: svc.KindRegistry, Message: "group " + name + " is not registered"}
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
		in := slices.ContainsFunc(g.Edges, func(e svc.GroupEdge) bool { return e.To == n.Name })
		out := slices.ContainsFunc(g.Edges, func(e svc.GroupEdge) bool { return e.From == n.Name })
		if !in {
			t.Entry = append(t.Entry, n.Name)
		}
		if !out {
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

func (f *fakeBackend) RunGroup(ctx context.Context, name string, task svc.TaskSpec) (svc.RunResult, error) {
	// Recorded last, over what the nodes' runs recorded.
	defer func() {
		f.mu.Lock()
		f.lastTask, f.lastCtxID = task, svc.RequestIDFrom(ctx)
		f.mu.Unlock()
	}()
	g, ok := fakeGroups[name]
	if !ok {
		return svc.RunResult{}, groupRegistryError(name)
	}
	switch name {
	case "empty":
		return svc.RunResult{}, nil
	case "both":
		return svc.RunResult{Agent: &svc.AgentResult{}, Group: &svc.GroupResult{}}, nil
	}
	return runGraph(ctx, f.Run, g, task)
}

// runGraph runs g's nodes in the order listed (upstream first), each on its
// upstream's output or, for an entry node, on the task's input, and answers
// with the terminal nodes' results in the envelope the runtime would use.
func runGraph(ctx context.Context, run func(context.Context, string, svc.TaskSpec) (svc.AgentResult, error), g svc.Group, task svc.TaskSpec) (svc.RunResult, error) {
	trace := task.RequestID
	if trace == "" {
		trace = svc.RequestIDFrom(ctx)
	}
	if trace == "" {
		trace = uuid.Must(uuid.NewV7()).String()
	}
	topo := topologyOf(g)
	results := make(map[string]svc.AgentResult, len(g.Nodes))
	for _, n := range g.Nodes {
		input := task.Input
		if i := slices.IndexFunc(g.Edges, func(e svc.GroupEdge) bool { return e.To == n.Name }); i >= 0 {
			input = results[g.Edges[i].From].Output
		}
		res, err := run(ctx, n.Agent, svc.TaskSpec{Input: input, RequestID: trace, Metadata: task.Metadata})
		if err != nil {
			return svc.RunResult{}, err
		}
		results[n.Name] = res
	}
	if len(topo.Terminal) == 1 {
		res := results[topo.Terminal[0]]
		return svc.RunResult{Agent: &res}, nil
	}
	out := &svc.GroupResult{Group: true, Outputs: map[string]svc.AgentResult{}, Success: true,
		Metadata: svc.GroupMetadata{TraceID: trace, GroupName: g.Name, Invocations: len(g.Nodes), Backend: "local"}}
	for _, name := range topo.Terminal {
		out.Outputs[name] = results[name]
		out.Success = out.Success && results[name].Success
	}
	return svc.RunResult{Group: out}, nil
}
