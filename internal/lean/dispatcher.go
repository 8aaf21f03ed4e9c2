package lean

import (
	"runtime"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Dispatcher is the actor.Dispatcher of the runtime's actors: it runs
// mailboxes on the goroutines of a bounded pool (NewDispatcherPool), at
// most its maximum at once, and the pool queues the mailboxes scheduled
// beyond that in order. Actors never block in Receive, so more goroutines
// than cores add no throughput; an unbounded dispatcher (a goroutine per
// scheduled mailbox) started one for every mailbox waiting for a core,
// thousands while a gather spawns its invocations, and each kept the 8 KiB
// stack protoactor's spawn path grows until it retired (a million parked
// runs measured 1.3 % more goroutines, and 0.45 KiB more stack per run,
// than runs).
//
// The bound and the queue live in the pool, under the one lock a hand-off
// to an idle worker takes anyway: a dispatcher of its own in front of the
// pool (a second mutex and queue on every Schedule, and on every mailbox a
// worker took) cost the in-process gather about a tenth of its throughput.
type Dispatcher struct {
	pool *Pool
	n    int // messages a mailbox processes before yielding
}

var _ actor.Dispatcher = (*Dispatcher)(nil)

// DefaultMaxMailboxWorkers is how many goroutines a mailbox pool lets run
// mailboxes at once when its max is 0: many more than cores, so that an
// actor whose Receive is slower than it should be (an emitter writing to a
// file) does not hold the others up, and few enough that their stacks are
// nothing beside the runs'.
func DefaultMaxMailboxWorkers() int { return max(256, 64*runtime.GOMAXPROCS(0)) }

// NewDispatcherPool returns the pool a Dispatcher runs mailboxes on: at
// most max at once (DefaultMaxMailboxWorkers when max <= 0), workers idle
// for longer than idle retiring. The owner closes it after the actors stop.
func NewDispatcherPool(idle time.Duration, max int) *Pool {
	if max <= 0 {
		max = DefaultMaxMailboxWorkers()
	}
	return NewBoundedPool(idle, max)
}

// NewDispatcher returns a dispatcher that runs mailboxes on pool (from
// NewDispatcherPool: an unbounded pool starts a goroutine per mailbox
// waiting for a core), each processing up to throughput messages before
// it yields.
func NewDispatcher(pool *Pool, throughput int) *Dispatcher {
	return &Dispatcher{pool: pool, n: throughput}
}

// Schedule implements actor.Dispatcher: fn runs on an idle or new worker,
// or once one is free, after the mailboxes scheduled before it.
func (d *Dispatcher) Schedule(fn func()) { d.pool.Go(fn) }

// Throughput implements actor.Dispatcher.
func (d *Dispatcher) Throughput() int { return d.n }

// Workers is the number of goroutines running mailboxes now.
func (d *Dispatcher) Workers() int { return d.pool.Busy() }
