// Package remote runs a runtime's invocations on a fleet of workers: the
// publisher side of the distributed mode. It owns the decision of which
// invocations leave the process, the task each becomes (its run id, the
// cap left to it, its deadline, where its events go), and the token
// budget's pre-check and post-charge around the dispatch. It is apart
// from package supervisor because where an attempt runs is not
// supervision: the runtime hands it each attempt through actors.Env.Execute
// and keeps the run and invocation actors, so the timeout, cancellation,
// retries' events, progress and run events work as in one process.
//
// With a Dispatcher, every attempt of an invocation goes to the fleet
// instead of running the agent loop here. What changes is only where the
// agent loop runs:
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
//   - a run read as it streams (a followed submitted run, a run answered
//     as an event stream) asks the worker for the invocation's deltas,
//     which come back through the dispatcher to the run's DeltaSink here;
//   - a cancelled or timed-out invocation broadcasts a cancel of its task,
//     and the runtime's CancelRun a cancel of the whole run, which the
//     workers (and other serve nodes) act on.
//
// A worker's runtime may dispatch only nested runs instead (NestedOnly,
// `svc worker start --dispatch-nested`): the tasks it takes run there,
// and only the runs nested in them (spawn_agents' children, a team's
// delegates) go to the fleet, carrying the run id the worker was given
// (so a cancel of that run reaches them), what is left of the run's token
// cap (the task's token_budget on the next worker) and the subject the
// outermost publisher wants the events on; the depth travels as for any
// task.
package remote

import (
	"context"
	"math"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/dispatch"
)

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

// Config is what an Executor needs of its runtime.
type Config struct {
	Dispatcher Dispatcher
	// NestedOnly sends only the runs nested in the runtime's runs to the
	// fleet.
	NestedOnly bool
	// Registered reports whether c is the agent the runtime has
	// registered under its name, which a worker has a twin of.
	Registered func(c *agent.Compiled) bool
	// Nested reports whether the run of ctx is nested in another (a
	// spawned child, a team's delegate, or a run inside one).
	Nested func(ctx context.Context) bool
	// RunID returns the submitted run the request of ctx belongs to, ""
	// for a synchronous call.
	RunID func(ctx context.Context) string
	// Timeout is how long a dispatched task has, from its dispatch.
	Timeout time.Duration
}

// Executor runs attempts on the fleet: its Execute is the runtime's
// actors.Env.Execute, its Dispatches the Env.RemoteIf of NestedOnly.
type Executor struct{ cfg Config }

// New returns an Executor over cfg.Dispatcher.
func New(cfg Config) *Executor { return &Executor{cfg: cfg} }

// runCapped is an invocation's budget that knows what is left of its
// run's cap (actors.InvocationBudget).
type runCapped interface {
	RunRemaining() (left int64, capped bool)
}

// Dispatches reports whether inv goes to the fleet. A worker runs an
// agent as its specs register it. An agent this runtime compiled for one
// run (a team's coordinator, which gets the delegate tool; a child
// spawn_agents derived from its parent) has no such twin there: it runs
// here, and the runs its tools start go to the fleet. With NestedOnly only
// the nested runs (children and delegates) go.
//
// An agent of a submitted run (its journal in ctx) that may wait for a
// person (svc.Agent.MayWait) runs here too: a worker has no step log to
// park it on, and here it waits in the run store, to be resumed by any
// serve node (issue 31).
func (e *Executor) Dispatches(ctx context.Context, inv *agent.Invocation) bool {
	if !e.cfg.Registered(inv.Agent) {
		return false
	}
	if svc.JournalFrom(ctx) != nil && inv.Agent.Def.MayWait() {
		return false
	}
	if e.cfg.NestedOnly {
		return e.cfg.Nested(ctx)
	}
	return true
}

// Execute runs one attempt of inv: on the fleet when Dispatches says so,
// else here with the agent loop.
func (e *Executor) Execute(ctx context.Context, inv *agent.Invocation) (agent.Outcome, error) {
	if !e.Dispatches(ctx, inv) {
		return agent.Run(ctx, inv)
	}
	// A run's cap travels with the task: the run on the worker may spend
	// what is left of it, no more (taken before this dispatch reserves).
	var capLeft int64
	if rc, ok := inv.Budget.(runCapped); ok {
		if left, capped := rc.RunRemaining(); capped {
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
	s := svc.ScopeFrom(ctx)
	runID := e.cfg.RunID(ctx)
	if runID == "" {
		runID = s.RunID
	}
	if runID == "" {
		runID = inv.TraceID
	}
	// Someone reading the invocation's streamed answer here gets it from
	// the worker: the task asks for its deltas.
	var deltas svc.DeltaSink
	if sink := agent.DeltaSinkOf(inv.Emitter); sink != nil && sink.Listening() {
		deltas = sink
	}
	res, err := e.cfg.Dispatcher.Dispatch(ctx, dispatch.Request{
		Agent: inv.Agent.Def.Name, TrustLevel: inv.Agent.Def.Trust(), TaskID: inv.TaskID, TraceID: inv.TraceID,
		ParentTraceID: inv.ParentTraceID, SpanID: inv.SpanID, ParentSpanID: inv.ParentSpanID, RunID: runID,
		Input: inv.Input, Depth: int(inv.Depth), TokenBudget: capLeft, EventsTo: s.EventsTo,
		Deadline: time.Now().Add(e.cfg.Timeout), Deltas: deltas,
	})
	if err != nil {
		if inv.Budget != nil {
			_ = inv.Budget.Charge(0) // release the reservation
		}
		return agent.Outcome{}, err
	}
	out := agent.Outcome{Output: res.Output, Model: res.Metadata.Model, TokensUsed: res.Metadata.TokensUsed,
		CostUSD: res.Metadata.CostUSD, CostUnknown: res.Metadata.CostUnknown, ModelsTried: res.Metadata.ModelsTried,
		CachedTokens: int32(min(res.Metadata.CachedTokens, math.MaxInt32)), Remote: true}
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
