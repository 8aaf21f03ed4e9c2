package plain

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// budget is a run's token cap, shared by the runs its tools start: a
// mutex around two counters, where the runtime's (actors.Budget) is
// lock-free. used is what the calls charged; committed adds what the
// calls in flight reserved.
type budget struct {
	mu              sync.Mutex
	limit           int64
	used, committed int64
}

// capKey is the context key of the run's cap, which nested runs draw on.
type capKey struct{}

// capFor is the cap a run draws on: its caller's, when it runs inside a
// capped run, else its own token_budget, else max_tokens_per_run, else
// none.
func (rt *Runtime) capFor(ctx context.Context, spec *svc.TaskSpec) *budget {
	if b, _ := ctx.Value(capKey{}).(*budget); b != nil {
		return b
	}
	limit := spec.TokenBudget
	if limit <= 0 {
		limit = rt.opts.MaxTokensPerRun
	}
	if limit <= 0 {
		return nil
	}
	return &budget{limit: limit}
}

// invBudget is one invocation's use of its run's cap (agent.Budget): one
// model call at a time, so one reservation held at most.
type invBudget struct {
	b    *budget
	inv  *agent.Invocation
	em   svc.Emitter
	held int64
}

// Reserve sets aside the call's estimate (at least 1) when it fits in
// what is left; when it does not but something is left and no other call
// holds a reservation, the call may take the rest.
func (ib *invBudget) Reserve(est int64) error {
	b := ib.b
	b.mu.Lock()
	est = max(est, 1)
	left := b.limit - b.committed
	take := est
	if left <= 0 || (est > left && b.committed != b.used) {
		used := b.used
		b.mu.Unlock()
		return ib.exceeded(used, false)
	}
	take = min(take, left)
	b.committed += take
	ib.held = take
	b.mu.Unlock()
	return nil
}

// Charge releases the reservation and charges what the call used; a
// charge that takes the run past its cap fails.
func (ib *invBudget) Charge(tokens int64) error {
	b := ib.b
	b.mu.Lock()
	b.committed += tokens - ib.held
	b.used += tokens
	used := b.used
	b.mu.Unlock()
	ib.held = 0
	if used > b.limit && tokens > 0 {
		return ib.exceeded(used, true)
	}
	return nil
}

// exceeded emits budget_exceeded and returns the error; a post-charge's
// event says by how much the call overshot the cap.
func (ib *invBudget) exceeded(used int64, charged bool) error {
	inv := ib.inv
	if ib.em != nil {
		p := svc.Payload{"limit": ib.b.limit, "used": used, "scope": "run"}
		if charged {
			p["overshoot"] = used - ib.b.limit
		}
		ib.em.Emit(svc.RuntimeEvent{EventType: svc.EventBudgetExceeded, Timestamp: time.Now().UTC(),
			AgentName: inv.Agent.Def.Name, TaskID: inv.TaskID, TraceID: inv.TraceID, ParentTraceID: inv.ParentTraceID,
			SpanID: inv.SpanID, ParentSpanID: inv.ParentSpanID, Payload: p})
	}
	return &svc.Error{Kind: svc.KindBudgetExceeded, Agent: inv.Agent.Def.Name, TaskID: inv.TaskID, Reason: "budget_exceeded",
		Message: "token budget of the run exceeded: used " + strconv.FormatInt(used, 10) + " of " + strconv.FormatInt(ib.b.limit, 10)}
}
