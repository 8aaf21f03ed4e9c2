// Package spawn owns the builtin tools that start runs from inside a run:
// spawn_agents, which any agent may list in builtin_tools to run other
// agents as child runs, and delegate, the tool a team's coordinator gets
// to hand a task to one of the team's delegates. It owns what the model
// may ask of them (their arguments, limits and results), the spawn path's
// cycle check, the derivation of a new child from its parent, and a team's
// max_rounds.
//
// It is apart from package supervisor because the tools are not
// supervision: a nested run is a run like any other, and the runtime's
// policies (depth, budget, timeout, cancellation, events) apply to it
// there. The tools reach the runtime only through Runs, the few calls they
// need, so they can be read and tested without it.
package spawn

import (
	"context"
	"sync/atomic"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// Runs are what the tools ask of the runtime.
type Runs struct {
	// Lookup returns the registered agent of that name, or a
	// RegistryError.
	Lookup func(name string) (*agent.Compiled, error)
	// Compile compiles an agent the tool derived for one call (a new
	// child, or a registered one given its parent's conversation), with
	// the MCP servers of owner.
	Compile func(def svc.Agent, owner string) (*agent.Compiled, error)
	// Run prepares task (ids, input check) and runs it on c as a run
	// nested in the run of ctx, one level deeper, and returns its result
	// with the typed error only. A rejection of the run (bad input, the
	// depth limit, its cap, its timeout) is the error. path is the spawn
	// path of a spawned child, ending with its own name; nil for a
	// delegate.
	Run func(ctx context.Context, c *agent.Compiled, task svc.TaskSpec, path []string) (svc.AgentResult, error)
	// Path returns the spawn path of the run of ctx: the agents that
	// spawned it, outermost first, ending with its own agent; nil for a
	// run nobody spawned.
	Path func(ctx context.Context) []string
	// Rounds returns the counter of a team run's delegate calls, nil
	// outside a team run.
	Rounds func(ctx context.Context) *atomic.Int64
	// MaxChildren is the most children one spawn_agents call may ask for
	// (svc.Options.MaxSpawnChildren); 0 means the default.
	MaxChildren int
	// Emitter receives the agent_failed of a child refused as a spawn
	// cycle.
	Emitter svc.Emitter
	// Backend is the "backend" of that event.
	Backend string
}
