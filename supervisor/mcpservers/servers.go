// Package mcpservers owns the link between a runtime's registered agents
// and their MCP tool servers: which servers an agent's tools come from,
// checking each configuration before an agent is compiled, retiring the
// servers no agent declares any more after the registry is replaced, and
// listing the tools of the servers that have started for the catalog.
//
// Servers belong to the agent that declares them (the owner); a child
// spawned from a parent uses its parent's servers rather than starting
// its own, and a team's coordinator shares the servers of the agent it
// is. The servers themselves (sessions, restarts with backoff, the
// subprocesses) are package tools/mcp's; this package decides which of
// them an agent gets and when one is no longer wanted. It is apart from
// package supervisor because that is the registry's business with the
// tool servers, not supervision.
package mcpservers

import (
	"context"
	"slices"
	"strconv"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/supervisor/registry"
	"github.com/svc-dev/svc/tools/mcp"
)

// Servers are the MCP tool servers of one runtime's agents. Create them
// with New and stop them with Shutdown, before the actor system.
type Servers struct{ m *mcp.Manager }

// New returns the servers of a runtime whose actors live in system.
func New(system *actor.ActorSystem, cfg mcp.Config) *Servers {
	return &Servers{m: mcp.NewManager(system, cfg)}
}

// Check checks the configuration of each of a's MCP servers, naming the
// first bad one in a SpecValidationError.
func Check(a svc.Agent) error {
	for i, s := range a.MCPServers {
		if err := mcp.Validate(s); err != nil {
			return &svc.Error{Kind: svc.KindSpecValidation, Agent: a.Name, Err: err,
				Message: "agent " + a.Name + ": mcp_servers[" + strconv.Itoa(i) + "]: " + err.Error()}
		}
	}
	return nil
}

// Sources returns the tool sources of a's servers as servers of owner (a
// itself, or the parent of a spawned child), checking each configuration
// first so a bad one fails compilation before any server is touched.
func (s *Servers) Sources(owner string, a svc.Agent) ([]svc.ToolSource, error) {
	if err := Check(a); err != nil || len(a.MCPServers) == 0 {
		return nil, err
	}
	out := make([]svc.ToolSource, len(a.MCPServers))
	for i, srv := range a.MCPServers {
		out[i] = s.m.Source(owner, srv)
	}
	return out, nil
}

// Retire stops the servers of agents no longer registered, and the
// servers an agent no longer declares, after the registry went from old
// to next.
func (s *Servers) Retire(old, next *registry.Snapshot) {
	for name, c := range old.Agents() {
		nc, ok := next.Agent(name)
		switch {
		case !ok:
			s.m.Sources(name, nil)
		case len(c.Def.MCPServers) > 0:
			s.m.Sources(name, nc.Def.MCPServers)
		}
	}
}

// Catalog lists the tools of the servers of reg's agents that have
// started: asking a server that has not started would start it.
func (s *Servers) Catalog(ctx context.Context, reg *registry.Snapshot) []registry.ServerTool {
	var out []registry.ServerTool
	for _, st := range s.m.Status() {
		if len(st.Tools) == 0 {
			continue
		}
		c, ok := reg.Agent(st.Agent)
		if !ok {
			continue
		}
		i := slices.IndexFunc(c.Def.MCPServers, func(srv svc.MCPServer) bool { return srv.Name == st.Name })
		if i < 0 {
			continue
		}
		tools, err := s.m.Source(st.Agent, c.Def.MCPServers[i]).Tools(ctx)
		if err != nil {
			continue
		}
		for _, t := range tools {
			out = append(out, registry.ServerTool{Agent: st.Agent, Server: st.Name, Tool: t})
		}
	}
	return out
}

// Status reports the current servers, sorted by agent and name.
func (s *Servers) Status() []svc.ToolServerStatus { return s.m.Status() }

// Shutdown stops every server and waits for their subprocesses to exit
// (mcp.Manager.Shutdown).
func (s *Servers) Shutdown(ctx context.Context) error { return s.m.Shutdown(ctx) }
