// Package flow is the handler bookkeeping every broker shares: a bounded
// number of handler slots (the prefetch), the handlers' context, and the
// Stop/Drain lifecycle that waits for the broker's loops and the handlers.
package flow

import (
	"context"
	"sync"
	"sync/atomic"

	"go.uber.org/zap"
)

// Sub runs one subscription's loops and handlers.
type Sub struct {
	slots chan struct{}

	// loopCtx ends when the subscription stops taking messages: fetch loops
	// watch it.
	loopCtx    context.Context
	stopLoops  context.CancelFunc
	handlerCtx context.Context
	cancelH    context.CancelFunc

	loops    sync.WaitGroup
	handlers sync.WaitGroup

	// mu orders Go's handlers.Add before Drain's handlers.Wait.
	mu      sync.Mutex
	stopped bool

	once    sync.Once
	onClose func()
	err     error

	// OnRelease, when set before the first Go, runs after a handler's slot
	// is given back: brokers that push messages use it to push the next.
	OnRelease func()
	// Panics, when set before the first Go, logs and counts the handlers'
	// panics (see Panics); Subject names the subscription in its log.
	Panics  *Panics
	Subject string
}

// New returns a subscription with prefetch handler slots; onClose (may be
// nil) runs once after the loops and handlers have stopped.
func New(prefetch int, onClose func()) *Sub {
	if prefetch < 1 {
		prefetch = 1
	}
	s := &Sub{slots: make(chan struct{}, prefetch), onClose: onClose}
	s.loopCtx, s.stopLoops = context.WithCancel(context.Background())
	s.handlerCtx, s.cancelH = context.WithCancel(context.Background())
	return s
}

// Context ends when the subscription stops taking messages.
func (s *Sub) Context() context.Context { return s.loopCtx }

// HandlerContext is the context handed to handlers.
func (s *Sub) HandlerContext() context.Context { return s.handlerCtx }

// Free is the number of handler slots free now.
func (s *Sub) Free() int { return cap(s.slots) - len(s.slots) }

// Acquire waits for a free handler slot; false when the subscription stops
// first. A slot taken must be handed to Go or given back with Release.
func (s *Sub) Acquire() bool {
	select {
	case s.slots <- struct{}{}:
		return true
	case <-s.loopCtx.Done():
		return false
	}
}

// TryAcquire takes a slot if one is free now.
func (s *Sub) TryAcquire() bool {
	select {
	case s.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

// Release gives back a slot taken with Acquire that was not used.
func (s *Sub) Release() { <-s.slots }

// Stopping reports whether the subscription has stopped taking messages.
func (s *Sub) Stopping() bool { return s.loopCtx.Err() != nil }

// Go runs fn in a handler goroutine holding one slot (already acquired),
// which it releases when fn returns. A panic in fn is recovered: the
// delivery is abandoned, as if the process had died. Once the subscription
// has stopped (after its loops have returned) Go refuses: it gives the slot
// back and returns false, and the caller keeps the message.
func (s *Sub) Go(fn func(ctx context.Context)) bool {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		<-s.slots
		return false
	}
	s.handlers.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.handlers.Done()
		defer func() {
			<-s.slots
			if s.OnRelease != nil {
				s.OnRelease()
			}
		}()
		defer s.Panics.Recover(s.Subject)
		fn(s.handlerCtx)
	}()
	return true
}

// Loop runs fn, a broker loop, until it returns; fn should return when
// Context ends.
func (s *Sub) Loop(fn func(ctx context.Context)) {
	s.loops.Add(1)
	go func() {
		defer s.loops.Done()
		fn(s.loopCtx)
	}()
}

// Stop stops the loops, cancels the handlers and waits for all of them.
func (s *Sub) Stop() error { return s.finish(context.Background(), true) }

// Drain stops the loops and waits for the handlers to return; when ctx ends
// first it cancels them and waits.
func (s *Sub) Drain(ctx context.Context) error { return s.finish(ctx, false) }

func (s *Sub) finish(ctx context.Context, force bool) error {
	s.once.Do(func() {
		s.stopLoops()
		s.loops.Wait()
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		done := make(chan struct{})
		go func() {
			s.handlers.Wait()
			close(done)
		}()
		if force {
			s.cancelH()
		} else {
			select {
			case <-done:
			case <-ctx.Done():
				s.err = ctx.Err()
				s.cancelH()
			}
		}
		<-done
		s.cancelH()
		if s.onClose != nil {
			s.onClose()
		}
	})
	return s.err
}

// Panics recovers, logs and counts the panics of the handlers a broker
// calls. Recovering is right there: the Broker contract says a handler's
// panic abandons its delivery (redelivered after the ack deadline), and the
// goroutine that called the handler serves the subscription's other
// messages (a broadcast loop) or holds one of its prefetch slots, so a
// panic let through would end the process, or the subscription, for one
// bad message. Logged (with the stack) and counted, it is still seen.
type Panics struct {
	// Log receives one error line per panic; nil logs nothing.
	Log *zap.Logger
	n   atomic.Int64
}

// Recover, deferred directly around a handler call, recovers its panic.
// A nil Panics recovers without logging or counting.
func (p *Panics) Recover(subject string) {
	v := recover()
	if v == nil || p == nil {
		return
	}
	p.n.Add(1)
	if p.Log != nil {
		p.Log.Error("broker handler panicked; recovered, its delivery abandoned", zap.String("subject", subject),
			zap.Any("panic", v), zap.Stack("stack"))
	}
}

// Count is how many panics Recover recovered.
func (p *Panics) Count() int64 { return p.n.Load() }
