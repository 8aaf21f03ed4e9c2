package supervisor

import (
	"context"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
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
//     cap across the fleet; what is left of the run's cap goes with the
//     task, so the worker stops the run there too once it is spent;
//   - agent_dispatched is emitted here (by the dispatcher); agent_spawned,
//     agent_completed and agent_failed fire on the worker, except a failure
//     that happens here (the budget, the broker, no result in time);
//   - retries happen on the worker, under the worker's options;
//   - a team's coordinator runs here (it is compiled with the delegate
//     tool for the run); its delegates are dispatched like any run;
//   - a cancelled or timed-out invocation broadcasts a cancel of its task,
//     and CancelRun a cancel of the whole run, which the workers (and other
//     serve nodes) act on.
//
// A worker's runtime may have a NestedDispatcher instead (`svc worker
// start --dispatch-nested`): the tasks it takes run here, and only the
// runs nested in them (spawn_agents' children, a team's delegates) go to
// the fleet, carrying the run id the worker was given (so a cancel of
// that run reaches them), what is left of the run's token cap (the
// task's token_budget on the next worker) and the subject the outermost
// publisher wants the events on; the depth travels as for any task.

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

// dispatches reports whether inv goes to the fleet. A worker runs an
// agent as its specs register it. An agent this runtime compiled for one
// run (a team's coordinator, which gets the delegate tool; a child
// spawn_agents derived from its parent) has no such twin there: it runs
// here, and the runs its tools start go to the fleet. With a
// NestedDispatcher only the nested runs (children and delegates) go.
func (rt *Runtime) dispatches(ctx context.Context, inv *agent.Invocation) bool {
	if rt.dispatcher == nil {
		return false
	}
	if c, ok := rt.reg.Load().Agent(inv.Agent.Def.Name); !ok || c != inv.Agent {
		return false
	}
	if rt.nestedOnly {
		rs := runOf(ctx)
		return rs.nested
	}
	return true
}

// remoteExecute is the Env.Execute of a runtime with a Dispatcher or a
// NestedDispatcher.
func (rt *Runtime) remoteExecute(ctx context.Context, inv *agent.Invocation) (agent.Outcome, error) {
	if !rt.dispatches(ctx, inv) {
		return agent.Run(ctx, inv)
	}
	// A run's cap travels with the task: the run on the worker may spend
	// what is left of it, no more (taken before this dispatch reserves).
	var capLeft int64
	if ib, ok := inv.Budget.(*actors.InvocationBudget); ok {
		if left, capped := ib.RunRemaining(); capped {
			capLeft = max(left, 1) // 0 would mean "no cap" on the wire
		}
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
	// The run id is the submitted run's; on a worker, the run of the task
	// this one is nested in (so a cancel of that run reaches this task on
	// whichever worker takes it); else the trace of a synchronous call.
	s, rs := scopeOf(ctx)
	runID := rs.runID
	if runID == "" {
		runID = s.RunID
	}
	if runID == "" {
		runID = inv.TraceID
	}
	res, err := rt.dispatcher.Dispatch(ctx, dispatch.Request{
		Agent: inv.Agent.Def.Name, TrustLevel: inv.Agent.Def.Trust(), TaskID: inv.TaskID, TraceID: inv.TraceID,
		ParentTraceID: inv.ParentTraceID, SpanID: inv.SpanID, ParentSpanID: inv.ParentSpanID, RunID: runID,
		Input: inv.Input, Depth: inv.Depth, TokenBudget: capLeft, EventsTo: s.EventsTo,
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
