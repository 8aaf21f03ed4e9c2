package supervisor

import (
	"context"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
)

// The two token limits (docs/specs.md, "Token budgets"):
//
//   - the runtime's budget (Options.TokenBudget, scope "runtime"), one
//     actors.Budget for the life of the runtime, in Env.Budget, drawn on
//     by every model call of every run; once spent, every new run is
//     refused here at its entry, and calls of runs already going are
//     refused at their pre-check, until ResetTokenBudget;
//   - the cap of one run (TaskSpec.TokenBudget, else
//     Options.MaxTokensPerRun, scope "run"), made at the entry of a
//     top-level run (withCap) and shared through the context with the runs
//     nested in it; in a gather each task has its own.

// TokenBudget returns the state of the runtime's token budget, or
// svc.ErrNoTokenBudget. It implements svc.BudgetKeeper.
func (rt *Runtime) TokenBudget(context.Context) (svc.BudgetStatus, error) {
	if rt.env.Budget == nil {
		return svc.BudgetStatus{}, svc.ErrNoTokenBudget
	}
	return rt.env.Budget.Status(), nil
}

// ResetTokenBudget sets the runtime budget's used tokens back to 0, so
// runs are admitted again (the operator's reset; POST
// /runtime/budget/reset). Model calls in flight keep their reservations
// and charge them after the reset. svc.ErrNoTokenBudget when there is no
// budget.
func (rt *Runtime) ResetTokenBudget(context.Context) (svc.BudgetStatus, error) {
	if rt.env.Budget == nil {
		return svc.BudgetStatus{}, svc.ErrNoTokenBudget
	}
	st := rt.env.Budget.Reset()
	rt.log.Info("token budget reset", zap.Int64("limit", st.Limit), zap.Int64("reserved", st.Reserved))
	return st, nil
}

// refuseSpent refuses a new run once the runtime's budget is spent,
// emitting budget_exceeded (scope runtime) first.
func (rt *Runtime) refuseSpent(ctx context.Context, name, taskID, trace string) error {
	b := rt.env.Budget
	if b == nil || !b.Spent() {
		return nil
	}
	s := svc.ScopeFrom(ctx)
	return b.Refuse(name, taskID, trace, s.ParentTrace, s.ParentSpan)
}

// capOf is the per-run cap of a task: its own token_budget, else
// max_tokens_per_run (0: none).
func (rt *Runtime) capOf(task *svc.TaskSpec) int64 {
	if task.TokenBudget > 0 {
		return task.TokenBudget
	}
	return rt.opts.MaxTokensPerRun
}

// withCap returns ctx with a run cap for task in its scope, unless the
// context already has one (a nested run draws on its enclosing run's cap)
// or the cap is 0.
func (rt *Runtime) withCap(ctx context.Context, task *svc.TaskSpec) context.Context {
	rs := runOf(ctx)
	if rs.budget != nil {
		return ctx
	}
	limit := rt.capOf(task)
	if limit <= 0 {
		return ctx
	}
	next := *rs
	next.budget = actors.NewBudget(limit, actors.ScopeRun, rt.emitter)
	return withRun(ctx, &next)
}
