package actors

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// Budget is the token account of one top-level request (a run or a gather)
// and everything nested in it. It is a lock-free counter rather than an
// actor: every model call consults it twice, and a message round trip per
// check would cost more than the check. Reserve is the pre-check before a
// model call, Charge the post-charge after it; both emit budget_exceeded
// before returning BudgetExceededError.
type Budget struct {
	limit   int64
	used    atomic.Int64
	emitter svc.Emitter
}

// NewBudget returns a budget of limit tokens, or nil for limit 0 (none).
func NewBudget(limit int64, em svc.Emitter) *Budget {
	if limit <= 0 {
		return nil
	}
	return &Budget{limit: limit, emitter: em}
}

// Used is the number of tokens charged so far.
func (b *Budget) Used() int64 { return b.used.Load() }

// For binds the budget to one invocation, so its events name the agent,
// task, trace and span of inv.
func (b *Budget) For(inv *agent.Invocation) *InvocationBudget {
	return &InvocationBudget{b: b, inv: inv}
}

// InvocationBudget is a Budget seen from one invocation; it implements
// agent.Budget.
type InvocationBudget struct {
	b   *Budget
	inv *agent.Invocation
}

// Reserve fails once the budget is spent.
func (ib *InvocationBudget) Reserve() error {
	if used := ib.b.used.Load(); used >= ib.b.limit {
		return ib.exceeded(used)
	}
	return nil
}

// Charge records tokens and fails when they took the budget past its limit.
func (ib *InvocationBudget) Charge(tokens int64) error {
	if used := ib.b.used.Add(tokens); used > ib.b.limit {
		return ib.exceeded(used)
	}
	return nil
}

func (ib *InvocationBudget) exceeded(used int64) error {
	inv := ib.inv
	name := inv.Agent.Def.Name
	ib.b.emitter.Emit(svc.RuntimeEvent{
		EventType: svc.EventBudgetExceeded, Timestamp: time.Now().UTC(), AgentName: name,
		TaskID: inv.TaskID, TraceID: inv.TraceID, ParentTraceID: inv.ParentTraceID,
		SpanID: inv.SpanID, ParentSpanID: inv.ParentSpanID,
		Payload: svc.Payload{"limit": ib.b.limit, "used": used, "scope": "run"},
	})
	return &svc.Error{Kind: svc.KindBudgetExceeded, Agent: name, TaskID: inv.TaskID, Reason: "budget_exceeded",
		Message: "token budget exceeded: used " + strconv.FormatInt(used, 10) + " of " + strconv.FormatInt(ib.b.limit, 10)}
}
