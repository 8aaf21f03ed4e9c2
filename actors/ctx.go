package actors

import (
	"context"
	"sync/atomic"
	"time"
)

// An invocation is its own context.Context: the context its attempts run
// with (the agent loop, its model and tool calls), which the run actor
// cancels (cancel) at the invocation's deadline, on a cancelled run, or
// when the invocation is over. It behaves as a context.WithCancelCause
// under base() would, without the two allocations of one (96 bytes, which
// a million parked runs each held): Err is context.Canceled once
// cancelled, Done is closed then, Value is base()'s, Deadline is base()'s
// (none: the run actor enforces the timeout itself).
//
// context.Cause only finds a cause in the standard library's own cancel
// contexts, and a context derived from this one takes its cause from
// context.Cause of this one. So the cause, when there is one other than
// context.Canceled (a deadline, a shutdown, the caller's cause), is kept
// in a real context.WithCancelCause under base(), made and cancelled at
// the cancel (causeCtx), which Value answers from.
//
// The context package propagates a cancel from a custom context through
// its AfterFunc method, which keeps the functions in a list of its own
// (a derived context costs about what it does under a standard cancel
// context, whose children map this list replaces).

// ctxExtra is what only some invocations' contexts need, made the first
// time it is needed: the cause of a cancel and the functions to call on
// one.
type ctxExtra struct {
	cause atomic.Pointer[causeCtx] // set, under mu, by a cancel with a cause
	// afters are the registered functions (AfterFunc), newest first;
	// guarded by the invocation's mu.
	afters *afterFunc
}

// causeCtx is the standard cancel context an invocation's context keeps a
// cause in.
type causeCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// afterFunc is one AfterFunc registration.
type afterFunc struct {
	f    func()
	st   *invState
	next *afterFunc
	gone bool // stopped, or started: guarded by st.mu
}

// stop implements the stop function AfterFunc returns.
func (a *afterFunc) stop() bool {
	a.st.mu.Lock()
	defer a.st.mu.Unlock()
	if a.gone {
		return false
	}
	a.gone = true
	return true
}

// closedChan is the Done of an invocation cancelled before anything asked
// for its Done.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

var _ context.Context = (*invState)(nil)

// Deadline implements context.Context: base()'s (none: the run actor
// enforces the timeout).
func (st *invState) Deadline() (time.Time, bool) { return st.base().Deadline() }

// Done implements context.Context.
func (st *invState) Done() <-chan struct{} {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.doneCh == nil {
		if st.ended.Load() {
			st.doneCh = closedChan
		} else {
			st.doneCh = make(chan struct{})
		}
	}
	return st.doneCh
}

// Err implements context.Context: context.Canceled once cancelled, as a
// context.WithCancelCause's, whatever the cause.
func (st *invState) Err() error {
	if st.ended.Load() {
		<-st.Done() // closed by the cancel that set ended, before it ends
		return context.Canceled
	}
	return nil
}

// Value implements context.Context: base()'s values. Once a cancel with a
// cause made a causeCtx, its Value answers (the same values, and its
// cancel state for context.Cause).
func (st *invState) Value(key any) any {
	if x := st.extra.Load(); x != nil {
		if cc := x.cause.Load(); cc != nil {
			return cc.ctx.Value(key)
		}
	}
	return st.base().Value(key)
}

// AfterFunc is how the context package propagates this context's cancel
// to the contexts derived from it (context.WithCancel, WithTimeout,
// AfterFunc of it): f is called in its own goroutine once the context is
// cancelled (at once if it is), unless stop is called first.
func (st *invState) AfterFunc(f func()) (stop func() bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	a := &afterFunc{f: f, st: st}
	if st.ended.Load() {
		a.gone = true
		go f()
		return a.stop
	}
	x := st.extraLocked()
	// Drop the stopped registrations first: a long invocation derives a
	// context per call, each stopped when its call returns.
	for p := &x.afters; *p != nil; {
		if (*p).gone {
			*p = (*p).next
		} else {
			p = &(*p).next
		}
	}
	a.next, x.afters = x.afters, a
	return a.stop
}

// extraLocked returns st's ctxExtra, making it; st.mu is held.
func (st *invState) extraLocked() *ctxExtra {
	x := st.extra.Load()
	if x == nil {
		x = new(ctxExtra)
		st.extra.Store(x)
	}
	return x
}

// cancel cancels the invocation's context with cause (nil means
// context.Canceled), as a context.CancelCauseFunc does: the first cancel
// wins.
func (st *invState) cancel(cause error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.ended.Load() {
		return
	}
	if cause != nil && cause != context.Canceled {
		// Before ended is set: whoever sees the context cancelled finds
		// its cause.
		cc := new(causeCtx)
		cc.ctx, cc.cancel = context.WithCancelCause(st.base())
		cc.cancel(cause)
		st.extraLocked().cause.Store(cc)
	}
	st.ended.Store(true)
	if st.doneCh == nil {
		st.doneCh = closedChan
	} else {
		close(st.doneCh)
	}
	if x := st.extra.Load(); x != nil {
		for a := x.afters; a != nil; a = a.next {
			if !a.gone {
				a.gone = true
				go a.f()
			}
		}
		x.afters = nil
	}
}

// cause is context.Cause of the invocation's context.
func (st *invState) cause() error { return context.Cause(st) }
