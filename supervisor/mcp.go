package supervisor

import (
	"context"
	"slices"
	"strconv"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/tools/mcp"
)

// MCP tool servers: the runtime owns one mcp.Manager, whose actors live in
// the runtime's actor system. Servers belong to the agent that declares
// them (the owner); a child spawned from a parent uses its parent's
// servers rather than starting its own, and a team coordinator shares the
// servers of the agent it is.

// mcpSources returns the tool sources of a's servers for owner, checking
// each configuration first so a bad one fails compilation before any server
// is touched.
func (rt *Runtime) mcpSources(owner string, a svc.Agent) ([]svc.ToolSource, error) {
	if len(a.MCPServers) == 0 {
		return nil, nil
	}
	for i, s := range a.MCPServers {
		if err := mcp.Validate(s); err != nil {
			return nil, &svc.Error{Kind: svc.KindSpecValidation, Agent: a.Name, Err: err,
				Message: "agent " + a.Name + ": mcp_servers[" + strconv.Itoa(i) + "]: " + err.Error()}
		}
	}
	out := make([]svc.ToolSource, len(a.MCPServers))
	for i, s := range a.MCPServers {
		out[i] = rt.mcpm.Source(owner, s)
	}
	return out, nil
}

// compileAgentFor compiles a with the MCP servers of owner (a itself, or
// the parent of a spawned child).
func (rt *Runtime) compileAgentFor(a svc.Agent, owner string) (*agent.Compiled, error) {
	sources, err := rt.mcpSources(owner, a)
	if err != nil {
		return nil, err
	}
	return agent.Compile(a, rt.models,
		agent.WithPrices(rt.prices),
		agent.WithBuiltins(map[string]agent.Builtin{SpawnAgents: rt.newSpawnTool}),
		agent.WithToolSources(sources...))
}

// retireServers stops the servers of agents no longer registered, and of
// servers an agent no longer declares, after a Replace.
func (rt *Runtime) retireServers(old, next *registry) {
	for name, c := range old.byName {
		nc, ok := next.byName[name]
		switch {
		case !ok:
			rt.mcpm.Sources(name, nil)
		case len(c.Def.MCPServers) > 0:
			rt.mcpm.Sources(name, nc.Def.MCPServers)
		}
	}
}

// mcpCatalog lists the tools of the MCP servers that have started:
// asking a server that has not started would start it.
func (rt *Runtime) mcpCatalog(ctx context.Context) []serverTool {
	reg := rt.agents.Load()
	var out []serverTool
	for _, st := range rt.mcpm.Status() {
		if len(st.Tools) == 0 {
			continue
		}
		c, ok := reg.byName[st.Agent]
		if !ok {
			continue
		}
		i := slices.IndexFunc(c.Def.MCPServers, func(s svc.MCPServer) bool { return s.Name == st.Name })
		if i < 0 {
			continue
		}
		tools, err := rt.mcpm.Source(st.Agent, c.Def.MCPServers[i]).Tools(ctx)
		if err != nil {
			continue
		}
		for _, t := range tools {
			out = append(out, serverTool{agent: st.Agent, server: st.Name, tool: t})
		}
	}
	return out
}
