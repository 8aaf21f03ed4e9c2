package actors

import (
	"context"
	"time"
)

// An invocation is its own context.Context: the context its attempts run
// with (the agent loop, its model and tool calls), which the run actor
// cancels (cancel) at the invocation's deadline, on a cancelled run, or
// when the invocation is over. Its cancel state is the lean.Ctx embedded
// in invState (Done, Err, AfterFunc); what needs the base context is
// here. It behaves as a context.WithCancelCause under base() would:
// Value is base()'s, Deadline is base()'s (none: the run actor enforces
// the timeout itself).

var _ context.Context = (*invState)(nil)

// Deadline implements context.Context: base()'s (none: the run actor
// enforces the timeout).
func (st *invState) Deadline() (time.Time, bool) { return st.base().Deadline() }

// Value implements context.Context: base()'s values, and after a cancel
// with a cause what context.Cause needs (lean.Ctx.ValueIn).
func (st *invState) Value(key any) any { return st.Ctx.ValueIn(st.base(), key) }

// cancel cancels the invocation's context with cause (nil means
// context.Canceled), as a context.CancelCauseFunc does: the first cancel
// wins.
func (st *invState) cancel(cause error) { st.Ctx.Cancel(st.base(), cause) }

// cause is context.Cause of the invocation's context.
func (st *invState) cause() error { return context.Cause(st) }
