package actors

import (
	"runtime"
	"sync"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc/internal/gopool"
)

// Dispatcher is the actor.Dispatcher of the runtime's actors: it runs
// mailboxes on pooled goroutines, at most max of them at once, and queues
// the mailboxes scheduled beyond that in order. Actors never block in
// Receive, so more goroutines than cores add no throughput; an unbounded
// dispatcher (a goroutine per scheduled mailbox) started one for every
// mailbox waiting for a core, thousands while a gather spawns its
// invocations, and each kept the 8 KiB stack protoactor's spawn path grows
// until it retired (a million parked runs measured 1.3 % more goroutines,
// and 0.45 KiB more stack per run, than runs). Use NewDispatcher.
type Dispatcher struct {
	pool *gopool.Pool
	n    int // messages a mailbox processes before yielding
	max  int
	// worker is d.work as a func value, made once: starting a worker
	// allocates nothing.
	worker func()

	mu    sync.Mutex
	busy  int      // workers running or about to
	queue []func() // FIFO from head
	head  int
}

var _ actor.Dispatcher = (*Dispatcher)(nil)

// DefaultMaxMailboxWorkers is how many goroutines NewDispatcher lets run
// mailboxes at once when max is 0: many more than cores, so that an actor
// whose Receive is slower than it should be (an emitter writing to a
// file) does not hold the others up, and few enough that their stacks are
// nothing beside the runs'.
func DefaultMaxMailboxWorkers() int { return max(256, 64*runtime.GOMAXPROCS(0)) }

// NewDispatcher returns a dispatcher that runs at most max mailboxes at
// once (DefaultMaxMailboxWorkers when max <= 0) on pool's goroutines, each
// processing up to throughput messages before it yields.
func NewDispatcher(pool *gopool.Pool, throughput, max int) *Dispatcher {
	if max <= 0 {
		max = DefaultMaxMailboxWorkers()
	}
	d := &Dispatcher{pool: pool, n: throughput, max: max}
	d.worker = d.work
	return d
}

// Schedule implements actor.Dispatcher: fn runs on a worker, a new one if
// fewer than max run, else after the mailboxes scheduled before it.
func (d *Dispatcher) Schedule(fn func()) {
	d.mu.Lock()
	d.push(fn)
	start := d.busy < d.max
	if start {
		d.busy++
	}
	d.mu.Unlock()
	if start {
		d.pool.Go(d.worker)
	}
}

// Throughput implements actor.Dispatcher.
func (d *Dispatcher) Throughput() int { return d.n }

// work runs queued mailboxes until the queue is empty; its goroutine then
// goes back to the pool.
func (d *Dispatcher) work() {
	for {
		d.mu.Lock()
		fn := d.pop()
		if fn == nil {
			d.busy--
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		fn()
	}
}

func (d *Dispatcher) push(fn func()) {
	if len(d.queue) == cap(d.queue) && d.head > 0 {
		// Reuse the consumed front before growing.
		n := copy(d.queue, d.queue[d.head:])
		clear(d.queue[n:])
		d.queue, d.head = d.queue[:n], 0
	}
	d.queue = append(d.queue, fn)
}

func (d *Dispatcher) pop() func() {
	if d.head == len(d.queue) {
		return nil
	}
	fn := d.queue[d.head]
	d.queue[d.head] = nil
	d.head++
	if d.head == len(d.queue) {
		d.queue, d.head = d.queue[:0], 0
		if cap(d.queue) > 4096 {
			d.queue = nil // a burst's backlog is not kept
		}
	}
	return fn
}

// Workers is the number of goroutines running mailboxes now.
func (d *Dispatcher) Workers() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.busy
}
