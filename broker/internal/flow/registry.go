package flow

import (
	"sync"

	"github.com/svc-dev/svc"
)

// Registry is a broker client's set of live subscriptions: Close stops
// them all, and a subscription made after Close is refused. Every broker
// keeps one, so this bookkeeping is written once.
type Registry[T comparable] struct {
	mu     sync.Mutex
	closed bool
	live   map[T]struct{}
}

// Track adds s, or refuses it with svc.ErrBrokerClosed after Close.
func (r *Registry[T]) Track(s T) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return svc.ErrBrokerClosed
	}
	if r.live == nil {
		r.live = map[T]struct{}{}
	}
	r.live[s] = struct{}{}
	return nil
}

// Untrack removes s (a subscription that stopped).
func (r *Registry[T]) Untrack(s T) {
	r.mu.Lock()
	delete(r.live, s)
	r.mu.Unlock()
}

// Closed reports whether Close was called.
func (r *Registry[T]) Closed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// Close marks the registry closed and returns the subscriptions still live,
// for the caller to stop outside the lock; first is false when it was
// closed already (and live is then empty).
func (r *Registry[T]) Close() (live []T, first bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, false
	}
	r.closed = true
	for s := range r.live {
		live = append(live, s)
	}
	return live, true
}
