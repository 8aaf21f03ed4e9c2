package supervisor

import (
	"context"
	"slices"
	"strconv"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor/registry"
	"github.com/svc-dev/svc/supervisor/spawn"
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
	if err := checkMCP(a); err != nil || len(a.MCPServers) == 0 {
		return nil, err
	}
	out := make([]svc.ToolSource, len(a.MCPServers))
	for i, s := range a.MCPServers {
		out[i] = rt.mcpm.Source(owner, s)
	}
	return out, nil
}

// checkMCP checks the configuration of each of a's MCP servers.
func checkMCP(a svc.Agent) error {
	for i, s := range a.MCPServers {
		if err := mcp.Validate(s); err != nil {
			return &svc.Error{Kind: svc.KindSpecValidation, Agent: a.Name, Err: err,
				Message: "agent " + a.Name + ": mcp_servers[" + strconv.Itoa(i) + "]: " + err.Error()}
		}
	}
	return nil
}

// compileAgentFor compiles a with the MCP servers of owner (a itself, or
// the parent of a spawned child).
func (rt *Runtime) compileAgentFor(a svc.Agent, owner string) (*agent.Compiled, error) {
	sources, err := rt.mcpSources(owner, a)
	if err != nil {
		return nil, err
	}
	return compileWith(a, rt.models, rt.prices, rt.spawns, sources, agent.WithCoalesce(agent.CoalesceOf(rt.opts)))
}

// compileWith is the one compile of an agent: registration (above) and
// CheckAgent differ only in the tool sources and the spawn tool they bind.
func compileWith(a svc.Agent, models *model.Registry, prices *model.PriceTable, runs *spawn.Runs, sources []svc.ToolSource, more ...agent.CompileOption) (*agent.Compiled, error) {
	newSpawn := func(def svc.Agent) (svc.Tool, error) { return spawn.NewAgentsTool(runs, def), nil }
	return agent.Compile(a, models, append([]agent.CompileOption{
		agent.WithPrices(prices),
		agent.WithBuiltins(map[string]agent.Builtin{spawn.AgentsTool: newSpawn}),
		agent.WithToolSources(sources...)}, more...)...)
}

// CheckAgent reports what a runtime over models would refuse in a when
// registering it (Register), without a runtime: the same compile, with
// every MCP server configuration checked and none started. `svc validate`
// and the spec loader use it (app.SpecEnv), so that the specs they accept
// are the specs `svc serve` registers.
func CheckAgent(models *model.Registry, a svc.Agent) error {
	if err := checkMCP(a); err != nil {
		return err
	}
	// Sources are only counted and kept by the compile, never called.
	sources := make([]svc.ToolSource, len(a.MCPServers))
	c, err := compileWith(a, models, nil, nil, sources)
	if err != nil {
		return err
	}
	return checkSettings(c)
}

// settingsChecker is a model that can tell, before any call, that an
// agent's model_settings would fail (the test provider's call_tools and
// tool_arguments naming a tool the agent does not have).
type settingsChecker interface {
	CheckSettings(settings map[string]any, tools []string, open bool) error
}

// checkSettings asks each model of c that can check settings about c's
// model_settings. The tools are c's, and delegate, which a team gives its
// coordinator; an agent with MCP servers has tools known only once they
// start, so names outside the list are left to the call.
func checkSettings(c *agent.Compiled) error {
	names := []string{spawn.DelegateTool}
	for _, t := range c.ToolSpecs {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	for _, m := range c.Models {
		sc, ok := m.Model.(settingsChecker)
		if !ok {
			continue
		}
		if err := sc.CheckSettings(c.Def.ModelSettings, names, len(c.Def.MCPServers) > 0); err != nil {
			return &svc.Error{Kind: svc.KindSpecValidation, Agent: c.Def.Name, Err: err, Message: "agent " + c.Def.Name}
		}
	}
	return nil
}

// retireServers stops the servers of agents no longer registered, and of
// servers an agent no longer declares, after a Replace.
func (rt *Runtime) retireServers(old, next *registry.Snapshot) {
	for name, c := range old.Agents() {
		nc, ok := next.Agent(name)
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
func (rt *Runtime) mcpCatalog(ctx context.Context, reg *registry.Snapshot) []registry.ServerTool {
	var out []registry.ServerTool
	for _, st := range rt.mcpm.Status() {
		if len(st.Tools) == 0 {
			continue
		}
		c, ok := reg.Agent(st.Agent)
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
			out = append(out, registry.ServerTool{Agent: st.Agent, Server: st.Name, Tool: t})
		}
	}
	return out
}
