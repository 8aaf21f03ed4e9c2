package supervisor

import (
	"errors"
	"slices"
	"strings"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/supervisor/mcpservers"
	"github.com/svc-dev/svc/supervisor/spawn"
)

// Compiling agents: every agent the runtime registers, and every agent
// spawn_agents derives for a run, is compiled here with the runtime's
// models, prices, builtin tools and the MCP servers of its owner.

// compileAgentFor compiles a with the MCP servers of owner (a itself, or
// the parent of a spawned child).
func (rt *Runtime) compileAgentFor(a svc.Agent, owner string) (*agent.Compiled, error) {
	sources, err := rt.mcp.Sources(owner, a)
	if err != nil {
		return nil, err
	}
	return compileWith(a, rt.models, rt.prices, rt.spawns, sources, agent.WithCoalesce(agent.CoalesceOf(rt.opts)), agent.WithRateLimits(rt.limits))
}

// compileWith is the one compile of an agent: registration (above) and
// CheckAgent differ only in the tool sources and the spawn tool they bind.
func compileWith(a svc.Agent, models *model.Registry, prices *model.PriceTable, runs *spawn.Runs, sources []svc.ToolSource, more ...agent.CompileOption) (*agent.Compiled, error) {
	newSpawn := func(def svc.Agent) (svc.Tool, error) { return spawn.NewAgentsTool(runs, def), nil }
	return agent.Compile(a, models, append([]agent.CompileOption{
		agent.WithPrices(prices),
		agent.WithBuiltins(map[string]agent.Builtin{spawn.AgentsTool: newSpawn, svc.AskHumanTool: agent.AskHuman}),
		agent.WithToolSources(sources...)}, more...)...)
}

// CheckAgent reports what a runtime over models would refuse in a when
// registering it (Register), without a runtime: the same compile, with
// every MCP server configuration checked and none started. `svc validate`
// and the spec loader use it (app.SpecEnv), so that the specs they accept
// are the specs `svc serve` registers.
func CheckAgent(models *model.Registry, a svc.Agent) error {
	if err := mcpservers.Check(a); err != nil {
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
	ms := make([]svc.Model, len(c.Models))
	for i, m := range c.Models {
		ms[i] = m.Model
	}
	return askSettings(c.Def.Name, ms, c.Def.ModelSettings, names, len(c.Def.MCPServers) > 0)
}

// CheckSettings asks the providers of the models ids (an agent's model
// and fallbacks) about settings alone, the agent's tools unknown: the
// spec loader's check of a file whose other faults keep CheckAgent from
// running. Ids that do not resolve are skipped (CheckAgent reports them).
func CheckSettings(models *model.Registry, ids []string, settings map[string]any) error {
	var ms []svc.Model
	for _, id := range ids {
		if m, err := models.Resolve(id); err == nil {
			ms = append(ms, m)
		}
	}
	return askSettings("", ms, settings, nil, true)
}

// askSettings asks each model that can check settings.
func askSettings(agentName string, models []svc.Model, settings map[string]any, names []string, open bool) error {
	// Every model of the chain is asked, and every key it refuses is
	// reported, each key once (a fallback on another provider that refuses
	// the same key says nothing new).
	var errs []error
	seen := map[string]bool{}
	for _, m := range models {
		sc, ok := m.(settingsChecker)
		if !ok {
			continue
		}
		err := sc.CheckSettings(settings, names, open)
		if err == nil {
			continue
		}
		each := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			each = j.Unwrap()
		}
		for _, e := range each {
			key, _, _ := strings.Cut(e.Error(), ": ")
			if seen[key] {
				continue
			}
			seen[key] = true
			if agentName == "" {
				errs = append(errs, e)
			} else {
				errs = append(errs, &svc.Error{Kind: svc.KindSpecValidation, Agent: agentName, Err: e, Message: "agent " + agentName})
			}
		}
	}
	return errors.Join(errs...)
}
