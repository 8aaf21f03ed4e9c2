package supervisor

import (
	"context"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
	"github.com/svc-dev/svc/agent"
)

// The run entry point: Run → runCompiled → start → a shard spawns the run
// actor (actors.StartRun) → one invocation actor → the agent loop, or
// Env.Execute.

// Run runs one task on an agent and waits for the result. A run rejected
// once started (its token cap, its timeout, the depth limit) is the
// error, with the result as far as the run went: its metadata says what
// it spent.
func (rt *Runtime) Run(ctx context.Context, name string, task svc.TaskSpec) (svc.AgentResult, error) {
	c, err := rt.lookup(name)
	if err != nil {
		return svc.AgentResult{}, err
	}
	t, err := prepare(c, task, svc.RequestIDFrom(ctx), -1)
	if err != nil {
		return svc.AgentResult{}, err
	}
	if err := rt.refuseSpent(ctx, name, t.ID, t.Trace); err != nil {
		return svc.AgentResult{}, err
	}
	res, err := rt.runCompiled(rt.withCap(ctx, &task), c, t)
	res.Publish()
	return res, err
}

// runCompiled runs one prepared task on a compiled agent, as Run does, and
// returns its result with the typed error only (Run, spawn_agents and
// delegate build the wire form). A rejection, or the run's own timeout, is
// the call's error rather than a failed result (docs/api.md, "Errors"),
// with its kind and cause as the invocation had it; the result that comes
// with it says what the run spent.
func (rt *Runtime) runCompiled(ctx context.Context, c *agent.Compiled, t actors.Task) (svc.AgentResult, error) {
	ctx, s, rs := rt.enter(ctx)
	depth, err := rt.checkDepth(&s, c.Def.Name, t)
	if err != nil {
		return svc.AgentResult{}, err
	}
	res, err := rt.start(ctx, &s, rs, &actors.StartRun{Agent: c, Tasks: []actors.Task{t}, MaxConcurrency: 1, Depth: depth})
	if err != nil {
		return svc.AgentResult{}, err
	}
	r := res[0]
	if r.Err != nil && isRejection(svc.KindOf(r.Err)) {
		// The result goes along with the error for what it spent: a worker
		// reports a run stopped by its token cap with the tokens it used,
		// charged to the cap of the run that dispatched it.
		return r, r.Err
	}
	return r, nil
}

// start hands a run to a shard and waits for its reply. The run's context is
// the caller's: when the caller goes away, in-flight model and tool calls
// are cancelled through it.
func (rt *Runtime) start(ctx context.Context, s *svc.Scope, rs *runScope, req *actors.StartRun) ([]svc.AgentResult, error) {
	if err := rt.admit(); err != nil {
		return nil, err
	}
	defer rt.leave()
	rt.runs.Add(1)
	defer rt.runs.Add(-1)
	req.ParentTrace, req.ParentSpan = s.ParentTrace, s.ParentSpan
	req.Budget, req.Progress, req.Sink, req.Deltas = rs.budget, rs.progress, rs.sink, s.Deltas
	req.Ctx = ctx
	reply := make(chan actors.RunReply, 1)
	req.Reply = reply
	rt.system.Root.Send(rt.shard(), req)
	// The run actor always replies: with results, or with an error when the
	// runtime stops under it. Cancelling ctx makes it finish early.
	r := <-reply
	return r.Results, r.Err
}
