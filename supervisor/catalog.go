package supervisor

import (
	"context"
	"slices"
	"strings"

	"github.com/svc-dev/svc"
)

var (
	_ svc.ToolCatalog = (*Runtime)(nil)
	_ svc.RunLister   = (*Runtime)(nil)
)

// accessNames are the wire names of svc.Access values.
func accessName(a svc.Access) string {
	switch a {
	case svc.AccessRead:
		return "read"
	case svc.AccessNetwork:
		return "network"
	}
	return "write"
}

// Tools describes the tools of the registered agents and team
// coordinators, one descriptor per tool name and source, listing the
// agents that have it. Tools of MCP servers appear once their server has
// started (listing them must not start a lazy server).
func (rt *Runtime) Tools(ctx context.Context) ([]svc.ToolDescriptor, error) {
	reg := rt.agents.Load()
	byKey := map[string]*svc.ToolDescriptor{}
	add := func(agentName string, t svc.Tool, source, server string) {
		key := source + "\x00" + server + "\x00" + t.Name()
		d := byKey[key]
		if d == nil {
			in := t.InputSchema()
			if len(in) == 0 {
				in = []byte(`{"type":"object"}`)
			}
			d = &svc.ToolDescriptor{Name: t.Name(), Description: t.Description(), InputSchema: in,
				Access: accessName(t.Access()), Source: source, Server: server}
			byKey[key] = d
		}
		if !slices.Contains(d.Agents, agentName) {
			d.Agents = append(d.Agents, agentName)
		}
	}
	for _, name := range reg.names {
		c := reg.byName[name]
		for _, t := range c.Tools {
			src := "function"
			if slices.Contains(c.Def.BuiltinTools, t.Name()) {
				src = "builtin"
			}
			add(name, t, src, "")
		}
	}
	for _, gname := range reg.groupNames {
		g := reg.groups[gname]
		if g.team == nil {
			continue
		}
		for _, t := range g.team.Tools {
			src := "function"
			if _, ok := t.(*delegateTool); ok {
				src = "builtin"
			}
			add(g.team.Def.Name, t, src, "")
		}
	}
	if rt.mcp.tools != nil {
		for _, st := range rt.mcp.tools(ctx) {
			add(st.agent, st.tool, "mcp", st.server)
		}
	}
	out := make([]svc.ToolDescriptor, 0, len(byKey))
	for _, d := range byKey {
		slices.Sort(d.Agents)
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b svc.ToolDescriptor) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if c := strings.Compare(a.Source, b.Source); c != 0 {
			return c
		}
		return strings.Compare(a.Server, b.Server)
	})
	return out, nil
}

// mcpHooks connect the catalog to the runtime's MCP tool servers; nil
// functions mean there are none.
type mcpHooks struct {
	tools  func(ctx context.Context) []serverTool
	status func() []svc.ToolServerStatus
}

// serverTool is a started MCP server's tool, for the catalog.
type serverTool struct {
	agent, server string
	tool          svc.Tool
}

// ToolServers reports the MCP tool servers of the registered agents.
func (rt *Runtime) ToolServers(context.Context) ([]svc.ToolServerStatus, error) {
	if rt.mcp.status == nil {
		return []svc.ToolServerStatus{}, nil
	}
	return rt.mcp.status(), nil
}

// ListRuns lists submitted runs from the run store, newest first.
func (rt *Runtime) ListRuns(ctx context.Context, f svc.RunFilter) (svc.RunPage, error) {
	rl, ok := rt.store.(svc.RunLister)
	if !ok {
		return svc.RunPage{}, svc.Errorf(svc.KindRegistry, "the run store (%T) cannot list runs", rt.store)
	}
	page, err := rl.ListRuns(ctx, f)
	for i, r := range page.Runs {
		page.Runs[i].Progress = settledProgress(r.State, r.Progress)
	}
	return page, err
}
