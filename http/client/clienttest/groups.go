package clienttest

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	svc "github.com/svc-dev/svc"
)

func testGroups(t *testing.T, b svc.Backend) {
	names, err := b.Groups(ctxFor(t))
	if err != nil {
		t.Fatalf("Groups: %v", err)
	}
	if !slices.IsSorted(names) {
		t.Errorf("Groups = %q, not sorted", names)
	}
	for _, want := range []string{"pair", "split", "slowpair"} {
		if !slices.Contains(names, want) {
			t.Errorf("Groups = %q, lacks %q", names, want)
		}
	}
	if slices.Contains(names, "nope") {
		t.Errorf("Groups = %q: the fixture must not have \"nope\"", names)
	}
}

// mentions reports whether the Mermaid text names node as a word of its
// own, not merely as a letter of some keyword.
func mentions(mermaid, node string) bool {
	return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + regexp.QuoteMeta(node) + `([^A-Za-z0-9_]|$)`).MatchString(mermaid)
}

func testGroupTopology(t *testing.T, b svc.Backend) {
	for _, tc := range []struct {
		group           string
		nodes           []svc.GroupNode
		edges           []svc.GroupEdge
		entry, terminal []string
	}{
		{"pair", []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}},
			[]svc.GroupEdge{{From: "a", To: "b"}}, []string{"a"}, []string{"b"}},
		{"split", []svc.GroupNode{{Name: "a", Agent: "echo"}, {Name: "b", Agent: "echo"}, {Name: "c", Agent: "echo"}},
			[]svc.GroupEdge{{From: "a", To: "b"}, {From: "a", To: "c"}}, []string{"a"}, []string{"b", "c"}},
	} {
		topo, err := b.GroupTopology(ctxFor(t), tc.group)
		if err != nil {
			t.Fatalf("GroupTopology(%s): %v", tc.group, err)
		}
		if topo.Name != tc.group || topo.Kind != svc.GroupGraph {
			t.Errorf("GroupTopology(%s): name %q, kind %q; want %q, %q", tc.group, topo.Name, topo.Kind, tc.group, svc.GroupGraph)
		}
		byName := func(a, b svc.GroupNode) int { return cmp.Compare(a.Name, b.Name) }
		if got := slices.SortedFunc(slices.Values(topo.Nodes), byName); !slices.Equal(got, tc.nodes) {
			t.Errorf("GroupTopology(%s).Nodes = %+v, want %+v", tc.group, topo.Nodes, tc.nodes)
		}
		byEnds := func(a, b svc.GroupEdge) int {
			if c := cmp.Compare(a.From, b.From); c != 0 {
				return c
			}
			return cmp.Compare(a.To, b.To)
		}
		if got := slices.SortedFunc(slices.Values(topo.Edges), byEnds); !slices.Equal(got, tc.edges) {
			t.Errorf("GroupTopology(%s).Edges = %+v, want %+v", tc.group, topo.Edges, tc.edges)
		}
		if got := slices.Sorted(slices.Values(topo.Entry)); !slices.Equal(got, tc.entry) {
			t.Errorf("GroupTopology(%s).Entry = %q, want %q", tc.group, topo.Entry, tc.entry)
		}
		if got := slices.Sorted(slices.Values(topo.Terminal)); !slices.Equal(got, tc.terminal) {
			t.Errorf("GroupTopology(%s).Terminal = %q, want %q", tc.group, topo.Terminal, tc.terminal)
		}
		if topo.Mermaid == "" {
			t.Errorf("GroupTopology(%s).Mermaid is empty", tc.group)
		}
		for _, n := range tc.nodes {
			if !mentions(topo.Mermaid, n.Name) {
				t.Errorf("GroupTopology(%s).Mermaid does not name node %s:\n%s", tc.group, n.Name, topo.Mermaid)
			}
		}
	}
}

func testGroupUnknown(t *testing.T, b svc.Backend) {
	if _, err := b.GroupTopology(ctxFor(t), "nope"); !errors.Is(err, svc.ErrRegistry) {
		t.Errorf("GroupTopology(nope) error = %v, want a RegistryError", err)
	}
	if _, err := b.RunGroup(ctxFor(t), "nope", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrRegistry) {
		t.Errorf("RunGroup(nope) error = %v, want a RegistryError", err)
	}
	// An agent's name is not a group's.
	if _, err := b.RunGroup(ctxFor(t), "echo", svc.TaskSpec{Input: json.RawMessage(`1`)}); !errors.Is(err, svc.ErrRegistry) ||
		!strings.Contains(err.Error(), "echo is an agent: POST /agents/echo/run") {
		t.Errorf("RunGroup(echo), an agent, error = %v, want a RegistryError pointing at the agent route", err)
	}
}

const groupInput = `{"text":"hello","n":[1,2.5,true,null],"nested":{"k":"v"}}`

func testRunGroupPair(t *testing.T, b svc.Backend) {
	res, err := b.RunGroup(ctxFor(t), "pair", svc.TaskSpec{Input: json.RawMessage(groupInput), RequestID: "req-pair"})
	if err != nil {
		t.Fatalf("RunGroup(pair): %v", err)
	}
	if res.Agent == nil || res.Group != nil {
		t.Fatalf("RunGroup(pair) = agent %v, group %+v; want the AgentResult alone (one terminal fired)", res.Agent != nil, res.Group)
	}
	a := res.Agent
	if !a.Success || a.Error != nil || !res.Success() {
		t.Errorf("RunGroup(pair): success %v, error %+v", a.Success, a.Error)
	}
	if !sameJSON(t, a.Output, json.RawMessage(groupInput)) {
		t.Errorf("RunGroup(pair).Output = %s, want the input through two echoes", a.Output)
	}
	if a.AgentName != "echo" {
		t.Errorf("RunGroup(pair).AgentName = %q, want echo", a.AgentName)
	}
	if a.Metadata.TraceID != "req-pair" {
		t.Errorf("RunGroup(pair) trace_id = %q, want the task's request_id", a.Metadata.TraceID)
	}
}

func testRunGroupTraceID(t *testing.T, b svc.Backend) {
	ctx := svc.WithRequestID(ctxFor(t), "req-from-ctx")
	res, err := b.RunGroup(ctx, "pair", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Agent == nil || res.Agent.Metadata.TraceID != "req-from-ctx" {
		t.Errorf("RunGroup(pair) = %+v, want trace_id from the context", res.Agent)
	}
	res, err = b.RunGroup(ctx, "pair", svc.TaskSpec{Input: json.RawMessage(`1`), RequestID: "req-from-task"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Agent == nil || res.Agent.Metadata.TraceID != "req-from-task" {
		t.Errorf("RunGroup(pair) = %+v: the task's request_id must win over the context's", res.Agent)
	}
	res, err = b.RunGroup(ctxFor(t), "split", svc.TaskSpec{Input: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Group == nil || res.Group.Metadata.TraceID == "" {
		t.Errorf("RunGroup(split) without a request id = %+v, want a generated trace_id", res.Group)
	}
}

func testRunGroupSplit(t *testing.T, b svc.Backend) {
	res, err := b.RunGroup(ctxFor(t), "split", svc.TaskSpec{Input: json.RawMessage(groupInput), RequestID: "req-split"})
	if err != nil {
		t.Fatalf("RunGroup(split): %v", err)
	}
	if res.Group == nil || res.Agent != nil {
		t.Fatalf("RunGroup(split) = agent %+v, group %v; want the GroupResult alone (two terminals fired)", res.Agent, res.Group != nil)
	}
	g := res.Group
	if !g.Group || !g.Success || !res.Success() {
		t.Errorf("RunGroup(split): group %v, success %v; want both true", g.Group, g.Success)
	}
	if keys := slices.Sorted(maps.Keys(g.Outputs)); !slices.Equal(keys, []string{"b", "c"}) {
		t.Fatalf("RunGroup(split).Outputs has %q, want the terminals [b c]", keys)
	}
	for leaf, out := range g.Outputs {
		if !out.Success || !sameJSON(t, out.Output, json.RawMessage(groupInput)) || out.AgentName != "echo" {
			t.Errorf("output %s = success %v, agent %q, output %s; want echo's success with the input", leaf, out.Success, out.AgentName, out.Output)
		}
		if out.Metadata.TraceID != "req-split" {
			t.Errorf("output %s trace_id = %q, want the run's", leaf, out.Metadata.TraceID)
		}
	}
	if g.Metadata.TraceID != "req-split" || g.Metadata.GroupName != "split" {
		t.Errorf("RunGroup(split).Metadata = %+v, want trace_id req-split and group_name split", g.Metadata)
	}
}

func testRunGroupCancelled(t *testing.T, b svc.Backend) {
	ctx, cancel := context.WithCancel(ctxFor(t))
	defer cancel()
	timer := time.AfterFunc(100*time.Millisecond, cancel)
	defer timer.Stop()
	start := time.Now()
	res, err := b.RunGroup(ctx, "slowpair", svc.TaskSpec{Input: json.RawMessage(`1`)})
	elapsed := time.Since(start)
	if err == nil {
		t.Errorf("RunGroup(slowpair) with a cancelled context = %+v, nil; want an error", res)
	}
	// Node b sleeps 10 s; returning well before says cancellation reached
	// it, with room for a loaded machine.
	if elapsed > 5*time.Second {
		t.Errorf("RunGroup(slowpair) took %v after cancellation at 100ms", elapsed)
	}
}
