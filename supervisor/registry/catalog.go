package registry

import (
	"slices"
	"strings"

	"github.com/svc-dev/svc"
)

// ServerTool is a started MCP server's tool, for the catalog.
type ServerTool struct {
	Agent, Server string
	Tool          svc.Tool
}

// accessName is the wire name of an svc.Access value.
func accessName(a svc.Access) string {
	switch a {
	case svc.AccessRead:
		return "read"
	case svc.AccessNetwork:
		return "network"
	}
	return "write"
}

// Tools describes the tools of the snapshot's agents and team
// coordinators, and the MCP servers' tools given (those of the servers
// that have started: listing must not start a lazy server), one
// descriptor per tool name and source, listing the agents that have it.
func (s *Snapshot) Tools(servers []ServerTool) []svc.ToolDescriptor {
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
	for _, name := range s.names {
		c := s.agents[name]
		for _, t := range c.Tools {
			src := "function"
			if slices.Contains(c.Def.BuiltinTools, t.Name()) {
				src = "builtin"
			}
			add(name, t, src, "")
		}
	}
	for _, gname := range s.groupNames {
		g := s.groups[gname]
		if g.Team == nil {
			continue
		}
		for _, t := range g.Team.Tools {
			src := "function"
			if t == g.delegate {
				src = "builtin"
			}
			add(g.Team.Def.Name, t, src, "")
		}
	}
	for _, st := range servers {
		add(st.Agent, st.Tool, "mcp", st.Server)
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
	return out
}
