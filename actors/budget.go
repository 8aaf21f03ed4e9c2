package actors

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// Budget scopes, the "scope" of a budget_exceeded payload.
const (
	// ScopeRun is the cap of one run (TaskSpec.TokenBudget, else
	// max_tokens_per_run) and everything nested in it.
	ScopeRun = "run"
	// ScopeRuntime is the runtime's token_budget, shared by every run.
	ScopeRuntime = "runtime"
)

// Budget is a token account: the cap of one run (and everything nested in
// it), or the runtime's budget that every run shares. It is lock-free
// rather than an actor: every model call consults it twice, and a message
// round trip per check would cost more than the check.
//
// Reserve is the pre-check before a model call and really reserves: it
// adds the call's estimate to committed (used plus what calls in flight
// reserved) only when it fits under the limit, in one compare-and-swap, so
// many concurrent calls cannot all pass on the same remaining tokens.
// Settle is the post-charge: it releases the reservation and charges what
// the call used. See reserve for the one call that may take less than its
// estimate, and docs/specs.md, "Token budgets", for the bound this gives.
type Budget struct {
	limit int64
	scope string
	// used is the tokens charged; committed is used plus the reservations
	// of the calls in flight. Both only ever move by additions (and reset
	// subtracts what it clears from both), so committed == used + reserved
	// holds once concurrent updates land.
	used, committed atomic.Int64
	emitter         svc.Emitter
}

// NewBudget returns a budget of limit tokens for scope (ScopeRun or
// ScopeRuntime), or nil for limit 0 (none).
func NewBudget(limit int64, scope string, em svc.Emitter) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit, scope: scope, emitter: em}
}

// Limit is the budget's size in tokens.
func (b *Budget) Limit() int64 { return b.limit }

// Used is the number of tokens charged so far.
func (b *Budget) Used() int64 { return b.used.Load() }

// Spent reports whether the tokens charged reached the limit.
func (b *Budget) Spent() bool { return b.used.Load() >= b.limit }

// Status is the budget's state for GET /runtime/stats.
func (b *Budget) Status() svc.BudgetStatus {
	used, committed := b.used.Load(), b.committed.Load()
	return svc.BudgetStatus{Limit: b.limit, Used: used, Reserved: max(committed-used, 0), Remaining: max(b.limit-committed, 0)}
}

// Reset clears the tokens charged; the reservations of calls in flight
// stay, and their charges land after it.
func (b *Budget) Reset() svc.BudgetStatus {
	u := b.used.Swap(0)
	b.committed.Add(-u)
	return b.Status()
}

// reserve sets aside est tokens (at least 1) and returns how many it
// reserved, or false when the call does not fit. A call fits when its
// estimate fits in what is left. When it does not but something is left
// and nothing else is reserved, the call may still go and take the rest:
// that keeps a small cap usable with a large estimate (one call at a time,
// as a sequential run makes them), and since no other call can be in
// flight then, at most one call overshoots the limit, by less than its own
// charge.
func (b *Budget) reserve(est int64) (int64, bool) {
	est = max(est, 1)
	for {
		c := b.committed.Load()
		left := b.limit - c
		if left <= 0 {
			return 0, false
		}
		take := est
		if est > left {
			if c != b.used.Load() { // another call holds a reservation
				return 0, false
			}
			take = left
		}
		if b.committed.CompareAndSwap(c, c+take) {
			return take, true
		}
	}
}

// settle releases reserved tokens, charges tokens, and returns the tokens
// used after the charge.
func (b *Budget) settle(reserved, tokens int64) int64 {
	b.committed.Add(tokens - reserved)
	return b.used.Add(tokens)
}

// exceeded emits budget_exceeded for inv and returns the error.
func (b *Budget) exceeded(inv *agent.Invocation, used int64) error {
	b.emit(inv, svc.Payload{"limit": b.limit, "used": used, "scope": b.scope})
	return b.err(inv.Agent.Def.Name, inv.TaskID, used)
}

// overshot emits the budget_exceeded of a post-charge that took the
// tokens used past the limit: overshoot is how far past.
func (b *Budget) overshot(inv *agent.Invocation, used int64) {
	b.emit(inv, svc.Payload{"limit": b.limit, "used": used, "scope": b.scope, "overshoot": used - b.limit})
}

func (b *Budget) emit(inv *agent.Invocation, p svc.Payload) {
	b.emitter.Emit(svc.RuntimeEvent{
		EventType: svc.EventBudgetExceeded, Timestamp: time.Now().UTC(), AgentName: inv.Agent.Def.Name,
		TaskID: inv.TaskID, TraceID: inv.TraceID, ParentTraceID: inv.ParentTraceID,
		SpanID: inv.SpanID, ParentSpanID: inv.ParentSpanID, Payload: p,
	})
}

// err is the BudgetExceededError of this budget.
func (b *Budget) err(agentName, taskID string, used int64) error {
	what := "token budget of the run"
	if b.scope == ScopeRuntime {
		what = "token budget of the runtime"
	}
	return &svc.Error{Kind: svc.KindBudgetExceeded, Agent: agentName, TaskID: taskID, Reason: "budget_exceeded",
		Message: what + " exceeded: used " + strconv.FormatInt(used, 10) + " of " + strconv.FormatInt(b.limit, 10)}
}

// Refuse emits budget_exceeded for a run refused before it started
// (trace, task and parent ids as the run would have had) and returns its
// BudgetExceededError.
func (b *Budget) Refuse(agentName, taskID, trace, parentTrace, parentSpan string) error {
	used := b.used.Load()
	b.emitter.Emit(svc.RuntimeEvent{
		EventType: svc.EventBudgetExceeded, Timestamp: time.Now().UTC(), AgentName: agentName,
		TaskID: taskID, TraceID: trace, ParentTraceID: parentTrace, ParentSpanID: parentSpan,
		Payload: svc.Payload{"limit": b.limit, "used": used, "scope": b.scope},
	})
	return b.err(agentName, taskID, used)
}

// Budgets binds a run's cap and the runtime's budget (either may be nil)
// to one invocation, so its events name the agent, task, trace and span
// of inv; nil when both are nil.
func Budgets(run, runtime *Budget, inv *agent.Invocation) agent.Budget {
	if run == nil && runtime == nil {
		return nil
	}
	return &InvocationBudget{run: run, runtime: runtime, inv: inv}
}

// InvocationBudget is the budgets one invocation draws on; it implements
// agent.Budget. An invocation makes its model calls one at a time, so it
// holds at most one reservation per budget.
type InvocationBudget struct {
	run, runtime *Budget
	inv          *agent.Invocation
	// held are the reservations of the call in flight.
	heldRun, heldRuntime int64
}

// RunRemaining is what is left of the run's cap (limit less what is used
// and reserved), and false when the invocation draws on no run cap. A
// dispatcher hands it on as the cap of a run it sends to another process.
func (ib *InvocationBudget) RunRemaining() (int64, bool) {
	if ib.run == nil {
		return 0, false
	}
	return ib.run.Status().Remaining, true
}

// Reserve is the pre-check: it reserves est tokens in the run's cap, then
// in the runtime's budget, and fails (emitting budget_exceeded with that
// budget's scope) when either has no room, releasing what it took.
func (ib *InvocationBudget) Reserve(est int64) error {
	if ib.run != nil {
		n, ok := ib.run.reserve(est)
		if !ok {
			return ib.run.exceeded(ib.inv, ib.run.used.Load())
		}
		ib.heldRun = n
	}
	if ib.runtime != nil {
		n, ok := ib.runtime.reserve(est)
		if !ok {
			if ib.run != nil {
				ib.run.settle(ib.heldRun, 0)
				ib.heldRun = 0
			}
			return ib.runtime.exceeded(ib.inv, ib.runtime.used.Load())
		}
		ib.heldRuntime = n
	}
	return nil
}

// Charge is the post-charge: it releases the reservation of the call and
// charges tokens to both budgets. Charge(0), for a call that failed, only
// releases.
//
// A charge that takes a budget past its limit emits budget_exceeded with
// the overshoot, and then the two budgets part ways. Past the run's cap
// the call fails: the cap is the caller's own limit on that run, and
// stopping the run is its purpose. Past the runtime's budget it does not:
// the call's tokens are spent and paid for whatever happens, and failing
// its run would throw away what they bought; the budget is spent instead,
// so the runtime refuses every later run and model call up front (their
// pre-check and refuseSpent) until a reset.
func (ib *InvocationBudget) Charge(tokens int64) error {
	var err error
	if ib.run != nil {
		if used := ib.run.settle(ib.heldRun, tokens); used > ib.run.limit && tokens > 0 {
			ib.run.overshot(ib.inv, used)
			err = ib.run.err(ib.inv.Agent.Def.Name, ib.inv.TaskID, used)
		}
		ib.heldRun = 0
	}
	if ib.runtime != nil {
		if used := ib.runtime.settle(ib.heldRuntime, tokens); used > ib.runtime.limit && tokens > 0 {
			ib.runtime.overshot(ib.inv, used)
		}
		ib.heldRuntime = 0
	}
	return err
}
