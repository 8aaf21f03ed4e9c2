package svc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
)

// Group kinds.
const (
	// GroupGraph is a directed graph of agent nodes (the default).
	GroupGraph = "graph"
	// GroupTeam is a coordinator agent with named delegates it calls through
	// a generated delegate tool.
	GroupTeam = "team"
)

// Group is the definition of a group of agents: a directed graph of nodes
// (Kind "graph") or a team (Kind "team"). Like Agent it is plain data; the
// runtime copies it on registration. Package group builds and checks it.
type Group struct {
	Name string `json:"name"`
	Kind string `json:"kind"` // GroupGraph (default) or GroupTeam

	// Graph groups.
	Nodes []GroupNode `json:"nodes,omitempty"`
	Edges []GroupEdge `json:"edges,omitempty"`

	// Teams.
	Coordinator string   `json:"coordinator,omitempty"` // agent name
	Delegates   []string `json:"delegates,omitempty"`   // agent names
	MaxRounds   int      `json:"max_rounds,omitempty"`  // delegate calls allowed; 0 means DefaultMaxRounds

	// MCP decides how `svc mcp` and `svc serve --mcp` list the group.
	MCP MCPExposure `json:"mcp,omitzero"`
}

// DefaultMaxRounds bounds a team's delegate calls when MaxRounds is 0.
const DefaultMaxRounds = 8

// GroupNode is one node of a graph: a name unique in the group and the agent
// it runs.
type GroupNode struct {
	Name  string `json:"name"`
	Agent string `json:"agent"`
}

// GroupEdge connects two nodes. Expressions are CEL over `output` (the
// upstream node's output), `input` (the upstream node's input) and
// `metadata` (the task's metadata).
type GroupEdge struct {
	From string `json:"from"`
	To   string `json:"to"`
	// When, if set, must be true for the edge to fire.
	When string `json:"when,omitempty"`
	// Input, if set, builds the downstream input; the upstream output
	// otherwise.
	Input string `json:"input,omitempty"`
	// FanOut, if set, gives a list: the target runs once per item (the
	// item is its input, or Input evaluated with `item` bound).
	FanOut string `json:"fan_out,omitempty"`
	// MaxConcurrency bounds a fan-out's items in flight; 0 means
	// DefaultGatherConcurrency.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
}

// Clone returns a deep copy of g.
func (g Group) Clone() Group {
	c := g
	c.Nodes = slices.Clone(g.Nodes)
	c.Edges = slices.Clone(g.Edges)
	c.Delegates = slices.Clone(g.Delegates)
	c.MCP = g.MCP.clone()
	return c
}

// EffectiveKind is Kind with the default applied.
func (g *Group) EffectiveKind() string {
	if g.Kind == "" {
		return GroupGraph
	}
	return g.Kind
}

// Topology is what GET /groups/{name}/topology serves.
type Topology struct {
	Name     string      `json:"name"`
	Kind     string      `json:"kind"`
	Nodes    []GroupNode `json:"nodes"`
	Edges    []GroupEdge `json:"edges"`
	Entry    []string    `json:"entry"`
	Terminal []string    `json:"terminal"`
	// Team fields.
	Coordinator string   `json:"coordinator,omitempty"`
	Delegates   []string `json:"delegates,omitempty"`
	MaxRounds   int      `json:"max_rounds,omitempty"`
	// Mermaid is a flowchart of the group to paste into docs.
	Mermaid string `json:"mermaid"`
}

// GroupMetadata is the metadata of a GroupResult: tokens and cost summed over
// every node that ran, duration the wall time of the whole run.
type GroupMetadata struct {
	TraceID     string  `json:"trace_id"`
	GroupName   string  `json:"group_name"`
	DurationMS  float64 `json:"duration_ms"`
	TokensUsed  int64   `json:"tokens_used"`
	CostUSD     float64 `json:"cost_usd"`
	Invocations int     `json:"invocations"`
	Backend     string  `json:"backend"`
}

// GroupResult is the envelope of a group run in which several terminal
// nodes fired. Clients tell it from an AgentResult by the key "group".
type GroupResult struct {
	Group    bool                   `json:"group"` // always true
	Outputs  map[string]AgentResult `json:"outputs"`
	Success  bool                   `json:"success"`
	Metadata GroupMetadata          `json:"metadata"`
}

// RunResult is the answer of a group run: exactly one of Agent (one
// terminal node fired) and Group (several did) is set. It marshals as that
// one envelope, and unmarshals by the presence of the key "group".
type RunResult struct {
	Agent *AgentResult
	Group *GroupResult
}

// Success reports the outcome, whichever envelope it is.
func (r RunResult) Success() bool {
	switch {
	case r.Group != nil:
		return r.Group.Success
	case r.Agent != nil:
		return r.Agent.Success
	}
	return false
}

// MarshalJSON writes the envelope that is set.
func (r RunResult) MarshalJSON() ([]byte, error) {
	switch {
	case r.Group != nil && r.Agent != nil:
		return nil, fmt.Errorf("svc: RunResult has both an agent and a group result")
	case r.Group != nil:
		g := *r.Group
		g.Group = true
		return json.Marshal(g)
	case r.Agent != nil:
		return json.Marshal(*r.Agent)
	}
	return []byte("null"), nil
}

// UnmarshalJSON reads either envelope, telling them apart by "group".
func (r *RunResult) UnmarshalJSON(b []byte) error {
	*r = RunResult{}
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		return nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(b, &probe); err != nil {
		return err
	}
	if _, ok := probe["group"]; ok {
		var g GroupResult
		if err := json.Unmarshal(b, &g); err != nil {
			return err
		}
		r.Group = &g
		return nil
	}
	var a AgentResult
	if err := json.Unmarshal(b, &a); err != nil {
		return err
	}
	r.Agent = &a
	return nil
}

// RunProgress counts the invocations of a run: total grows when a fan-out
// resolves; a run can end completed with Failed > 0.
type RunProgress struct {
	Total     int `json:"total"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
	Running   int `json:"running"`
}

// ProgressFunc receives a run's progress after each change. It is called
// from the runtime's actors: it must return quickly and never block.
type ProgressFunc func(RunProgress)

// GroupBackend is the group half of the call surface; the runtime and both
// clients implement it alongside Backend.
type GroupBackend interface {
	// Groups lists the registered group names, sorted.
	Groups(ctx context.Context) ([]string, error)
	// GroupTopology describes a group.
	GroupTopology(ctx context.Context, name string) (Topology, error)
	// RunGroup runs a group on one task and waits for the result: the
	// plain AgentResult when one terminal node fired, a GroupResult when
	// several did. None firing is a TopologyError.
	RunGroup(ctx context.Context, name string, task TaskSpec) (RunResult, error)
}
