package supervisor

import (
	"context"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/dispatch"
)

// Remote invocations (the distributed mode's publisher side). With
// Config.Dispatcher set, every attempt of an invocation goes to the fleet
// through actors.Env.Execute instead of running the agent loop here; the
// run and invocation actors stay as they are, so the timeout, cancellation,
// batch and group events, progress and run events work exactly as in one
// process. What changes is only where the agent loop runs:
//
//   - the token budget is checked here before the dispatch (pre-check) and
//     charged here with the tokens the worker reports (post-charge), a soft
//     cap across the fleet;
//   - agent_dispatched is emitted here (by the dispatcher); agent_spawned,
//     agent_completed and agent_failed fire on the worker, except a failure
//     that happens here (the budget, the broker, no result in time);
//   - retries happen on the worker, under the worker's options;
//   - a team's coordinator runs here (it is compiled with the delegate
//     tool for the run); its delegates are dispatched like any run;
//   - a cancelled or timed-out invocation broadcasts a cancel of its task,
//     and CancelRun a cancel of the whole run, which the workers (and other
//     serve nodes) act on.

// Dispatcher sends invocations to a fleet of workers; *dispatch.Publisher
// is one.
type Dispatcher interface {
	// Dispatch publishes the task and waits for its one result, or for
	// ctx to end.
	Dispatch(ctx context.Context, req dispatch.Request) (svc.AgentResult, error)
	// Cancel broadcasts a cancel of a task, or of every task of a run.
	Cancel(runID, taskID string)
	// Backend is "broker:<scheme>", for events and result metadata.
	Backend() string
}

// remoteExecute is the Env.Execute of a runtime with a Dispatcher.
func (rt *Runtime) remoteExecute(ctx context.Context, inv *agent.Invocation) (agent.Outcome, error) {
	// A worker runs an agent as its specs register it. An agent this
	// runtime compiled for one run (a team's coordinator, which gets the
	// delegate tool) has no such twin there: it runs here, and the runs
	// its tools start (the delegates) go to the fleet.
	if c, ok := rt.agents.Load().byName[inv.Agent.Def.Name]; !ok || c != inv.Agent {
		return agent.Run(ctx, inv)
	}
	if inv.Budget != nil {
		// The worker's model calls are not seen from here: the pre-check
		// reserves the agent's max_tokens plus the input's estimate, and
		// the charge is the tokens the worker reports.
		est := agent.MaxTokens(inv.Agent.Def.ModelSettings) + int64(len(inv.Input)+3)/4
		if err := inv.Budget.Reserve(est); err != nil {
			return agent.Outcome{}, err
		}
	}
	_, rs := scopeOf(ctx)
	runID := rs.runID
	if runID == "" {
		runID = inv.TraceID // a synchronous call: its trace names it
	}
	res, err := rt.dispatcher.Dispatch(ctx, dispatch.Request{
		Agent: inv.Agent.Def.Name, TrustLevel: inv.Agent.Def.Trust(), TaskID: inv.TaskID, TraceID: inv.TraceID,
		ParentTraceID: inv.ParentTraceID, SpanID: inv.SpanID, RunID: runID, Input: inv.Input, Depth: inv.Depth,
		Deadline: time.Now().Add(rt.opts.Timeout()),
	})
	if err != nil {
		if inv.Budget != nil {
			_ = inv.Budget.Charge(0) // release the reservation
		}
		return agent.Outcome{}, err
	}
	out := agent.Outcome{Output: res.Output, Model: res.Metadata.Model, TokensUsed: res.Metadata.TokensUsed,
		CostUSD: res.Metadata.CostUSD, CostUnknown: res.Metadata.CostUnknown, ModelsTried: res.Metadata.ModelsTried,
		Remote: true}
	if inv.Budget != nil {
		if err := inv.Budget.Charge(out.TokensUsed); err != nil {
			out.Remote = false // the rejection is this side's: emit it here
			return out, err
		}
	}
	if !res.Success {
		if res.Error != nil {
			return out, res.Error.Err()
		}
		return out, svc.Errorf(svc.KindRuntime, "agent %s: the worker reported a failure without an error", inv.Agent.Def.Name)
	}
	return out, nil
}

// CancelLocal cancels this process's part of a submitted run that another
// process cancelled (a cancel broadcast by another serve node): the run's
// work stops here, and its record, which the other node already wrote,
// is left alone.
func (rt *Runtime) CancelLocal(runID string) {
	if c, ok := rt.submitted.Load(runID); ok {
		c.(context.CancelCauseFunc)(errRunCancelled)
	}
}
