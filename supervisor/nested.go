package supervisor

import (
	"context"
	"sync/atomic"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/supervisor/spawn"
)

// The nested entry point: a tool of a running invocation (spawn_agents, a
// team coordinator's delegate, package spawn) → runNested → runCompiled
// (run.go), with the invocation's scope in its context: one level deeper,
// under the same cap, cancellation and run event sink.

// nestedRuns is what the tools of package spawn get of the runtime.
func (rt *Runtime) nestedRuns() *spawn.Runs {
	return &spawn.Runs{
		Lookup:      rt.lookup,
		Compile:     rt.compileAgentFor,
		Run:         rt.runNested,
		Path:        func(ctx context.Context) []string { return runOf(ctx).path },
		Rounds:      func(ctx context.Context) *atomic.Int64 { return runOf(ctx).rounds },
		MaxChildren: rt.opts.MaxSpawnChildren,
		Emitter:     rt.emitter,
		Backend:     rt.env.BackendName(),
	}
}

// runNested prepares task and runs it on c inside the run of ctx: as a
// child spawned along path, or a team's delegate when path is nil.
func (rt *Runtime) runNested(ctx context.Context, c *agent.Compiled, task svc.TaskSpec, path []string) (svc.AgentResult, error) {
	t, err := prepare(c, task, "", -1)
	if err != nil {
		return svc.AgentResult{}, err
	}
	if path != nil {
		ctx = withSpawn(ctx, path)
	} else {
		ctx = withNested(ctx)
	}
	return rt.runCompiled(ctx, c, t)
}
