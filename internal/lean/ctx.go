package lean

import (
	"context"
	"sync"
	"sync/atomic"
)

// Ctx is the cancel state of a context.Context that lives inside the
// struct of its owner (an invocation's state) instead of in a
// context.WithCancelCause of its own: it behaves as a WithCancelCause
// under the owner's base context would, without its two allocations (96
// bytes, which a million parked runs each held). The owner embeds a Ctx
// by value (Done, Err and AfterFunc are promoted) and adds the two methods
// that need its base context, forwarding to ValueIn (Value) and to the
// base's Deadline, and cancels through Cancel. The zero Ctx is live.
//
// Err is context.Canceled once cancelled, Done is closed then, Value is
// the base's. context.Cause only finds a cause in the standard library's
// own cancel contexts, and a context derived from this one takes its
// cause from context.Cause of this one. So the cause, when there is one
// other than context.Canceled (a deadline, a shutdown, the caller's
// cause), is kept in a real context.WithCancelCause under the base, made
// and cancelled at the cancel, which ValueIn answers from.
//
// The context package propagates a cancel from a custom context through
// its AfterFunc method, which keeps the functions in a list of its own (a
// derived context costs about what it does under a standard cancel
// context, whose children map this list replaces).
//
// A Ctx is 24 bytes: the invocation's state that embeds it is cut to a
// size class (416 bytes), so the cancelled flag lives in the extra (or is
// the shared endedExtra) rather than in a field of its own.
type Ctx struct {
	// mu guards doneCh, extra's creation and contents and the cancel.
	mu     sync.Mutex
	doneCh chan struct{}
	// extra (made only when needed) holds whether the context is
	// cancelled, the cause of a cancel and the functions registered by
	// the contexts derived from this one.
	extra atomic.Pointer[ctxExtra]
}

// ctxExtra is what only some contexts need, made the first time it is
// needed: the cancelled flag, the cause of a cancel and the functions to
// call on one.
type ctxExtra struct {
	ended atomic.Bool              // set, under mu, by the cancel
	cause atomic.Pointer[causeCtx] // set, under mu, by a cancel with a cause
	// afters are the registered functions (AfterFunc), newest first;
	// guarded by the Ctx's mu.
	afters *afterFunc
}

// endedExtra is the extra of every context cancelled while it had none:
// cancelled, no cause, nothing registered. Nothing changes it: once a
// context is cancelled, AfterFunc and Cancel do not touch its extra.
var endedExtra = func() *ctxExtra {
	x := new(ctxExtra)
	x.ended.Store(true)
	return x
}()

// causeCtx is the standard cancel context a Ctx keeps a cause in.
type causeCtx struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// afterFunc is one AfterFunc registration.
type afterFunc struct {
	f    func()
	c    *Ctx
	next *afterFunc
	gone bool // stopped, or started: guarded by c.mu
}

// stop implements the stop function AfterFunc returns.
func (a *afterFunc) stop() bool {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	if a.gone {
		return false
	}
	a.gone = true
	return true
}

// closedChan is the Done of a context cancelled before anything asked for
// its Done.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// ended reports whether the context is cancelled.
func (c *Ctx) ended() bool {
	x := c.extra.Load()
	return x != nil && x.ended.Load()
}

// Done implements context.Context's Done.
func (c *Ctx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.doneCh == nil {
		if c.ended() {
			c.doneCh = closedChan
		} else {
			c.doneCh = make(chan struct{})
		}
	}
	return c.doneCh
}

// Err implements context.Context's Err: context.Canceled once cancelled,
// as a context.WithCancelCause's, whatever the cause.
func (c *Ctx) Err() error {
	if c.ended() {
		<-c.Done() // closed by the cancel that set ended, before it ends
		return context.Canceled
	}
	return nil
}

// ValueIn is context.Context's Value of the context whose base is base:
// base's values; once a cancel with a cause made a cause context, its
// Value answers (the same values, and its cancel state for
// context.Cause).
func (c *Ctx) ValueIn(base context.Context, key any) any {
	if x := c.extra.Load(); x != nil {
		if cc := x.cause.Load(); cc != nil {
			return cc.ctx.Value(key)
		}
	}
	return base.Value(key)
}

// AfterFunc is how the context package propagates this context's cancel
// to the contexts derived from it (context.WithCancel, WithTimeout,
// AfterFunc of it): f is called in its own goroutine once the context is
// cancelled (at once if it is), unless stop is called first.
func (c *Ctx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := &afterFunc{f: f, c: c}
	if c.ended() {
		a.gone = true
		go f()
		return a.stop
	}
	x := c.extraLocked()
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

// extraLocked returns c's ctxExtra, making it; c.mu is held and c is not
// cancelled.
func (c *Ctx) extraLocked() *ctxExtra {
	x := c.extra.Load()
	if x == nil {
		x = new(ctxExtra)
		c.extra.Store(x)
	}
	return x
}

// Cancel cancels the context with cause (nil means context.Canceled), as
// a context.CancelCauseFunc does: the first cancel wins. base is the
// context's base, which a cause context derives from.
func (c *Ctx) Cancel(base context.Context, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ended() {
		return
	}
	x := c.extra.Load()
	if cause != nil && cause != context.Canceled {
		// Before ended is set: whoever sees the context cancelled finds
		// its cause.
		cc := new(causeCtx)
		cc.ctx, cc.cancel = context.WithCancelCause(base)
		cc.cancel(cause)
		x = c.extraLocked()
		x.cause.Store(cc)
	}
	if x == nil {
		c.extra.Store(endedExtra)
	} else {
		x.ended.Store(true)
	}
	if c.doneCh == nil {
		c.doneCh = closedChan
	} else {
		close(c.doneCh)
	}
	if x != nil {
		for a := x.afters; a != nil; a = a.next {
			if !a.gone {
				a.gone = true
				go a.f()
			}
		}
		x.afters = nil
	}
}
