package lean

// The pool: a new goroutine starts with a 2 KiB stack and the agent loop
// grows it several times; copying stacks was a third of the runtime's CPU
// in the gather benchmark. Reusing goroutines keeps their grown stacks,
// and idle ones retire on their own.

import (
	"sync"
	"time"
)

// Pool runs functions on reused goroutines. Go never blocks: it hands f to
// an idle worker or starts a new one; a bounded pool (NewBoundedPool) that has
// its maximum of workers busy queues f instead, in order, for the next
// worker that finishes its function. Idle workers wait on a stack (the most
// recently used is reused first, so the rest can age out) and a janitor
// retires those idle for longer than the idle timeout. There is no timer per
// task. Use NewPool or NewBoundedPool; stop with Close.
type Pool struct {
	mu     sync.Mutex
	idle   []*worker // LIFO; idle[0] has waited longest
	closed bool
	live   int
	// max bounds live (0: unbounded); queue holds, FIFO from head, what
	// Go was handed while max workers were busy. Both are under mu, the
	// lock Go takes anyway to find an idle worker: a bounded pool costs a
	// hand-off no more than an unbounded one.
	max   int
	queue []func()
	head  int
	// live and late (the functions started after Close) count what Close
	// waits for; they are counted under mu rather than in a WaitGroup,
	// whose Add must not race with Close's Wait (a timer may hand work to
	// the pool at any time).
	late int
	// detached counts the functions that may never return (Detach):
	// Close does not wait for that many workers.
	detached int
	// exited is signalled whenever a worker or late goroutine ends.
	exited *sync.Cond

	idleFor time.Duration
	epoch   time.Time // what worker.last counts from
	stop    chan struct{}
	wg      sync.WaitGroup // the janitor
	once    sync.Once
}

// worker is one pooled goroutine's handoff point. A busy worker is held
// by the function it runs for as long as that runs (a million parked
// agent loops hold a million workers), so it is small: an idle worker
// waits on a condition of its own under the pool's mutex, and Go hands it
// f by setting f and signalling (80 bytes; a channel per worker was about
// 190 with the struct).
type worker struct {
	wake sync.Cond // L is the pool's mu
	f    func()    // nil once woken: exit
	// last is when it last became idle, since the pool's epoch.
	last time.Duration
	idle bool
}

// NewPool returns an unbounded pool whose workers exit after idle without work.
func NewPool(idle time.Duration) *Pool { return NewBoundedPool(idle, 0) }

// NewBoundedPool returns a pool that runs at most max functions at once
// (unbounded when max <= 0) and queues the rest in order; its workers
// exit after idle without work. Functions that block hold their workers,
// so a bounded pool is for functions that never wait on one another.
func NewBoundedPool(idle time.Duration, max int) *Pool {
	p := &Pool{idleFor: idle, stop: make(chan struct{}), epoch: time.Now(), max: max}
	p.exited = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.janitor()
	return p
}

// Workers is the number of live worker goroutines.
func (p *Pool) Workers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live
}

// Busy is the number of workers running a function now (live ones that
// are not idle).
func (p *Pool) Busy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.live - len(p.idle)
}

// Queued is the number of functions waiting for a worker of a bounded pool.
func (p *Pool) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) - p.head
}

// Go runs f on a pooled goroutine. After Close, f runs on a goroutine of its
// own, so nothing handed to the pool is ever dropped.
func (p *Pool) Go(f func()) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		w.wakeWith(f)
		p.mu.Unlock()
		return
	}
	if p.closed {
		p.late++
		p.mu.Unlock()
		go func() {
			defer func() {
				p.mu.Lock()
				p.late--
				p.exited.Broadcast()
				p.mu.Unlock()
			}()
			f()
		}()
		return
	}
	if p.max > 0 && p.live >= p.max {
		// No worker is idle (it would have been handed f), so all max
		// are busy: the first to finish takes f (park).
		p.push(f)
		p.mu.Unlock()
		return
	}
	p.live++
	p.mu.Unlock()
	w := &worker{}
	w.wake.L = &p.mu
	go p.run(w, f)
}

func (p *Pool) run(w *worker, f func()) {
	for f != nil {
		f()
		f = p.park(w)
	}
	p.mu.Lock()
	p.live--
	p.exited.Broadcast()
	p.mu.Unlock()
}

// Detach tells the pool that a function it runs was abandoned by its
// owner and may never return (a tool call stuck in a system call): Close
// then does not wait for one worker. Call Rejoin when the function does
// return.
func (p *Pool) Detach() {
	p.mu.Lock()
	p.detached++
	p.mu.Unlock()
}

// Rejoin undoes one Detach, once the abandoned function has returned.
func (p *Pool) Rejoin() {
	p.mu.Lock()
	p.detached--
	p.mu.Unlock()
}

// park returns the next queued function, if there is one; else it puts
// the worker on the idle stack and waits until it is handed a function,
// which it returns. nil means the worker should exit (retired, or the pool
// is closed and its queue drained).
func (p *Pool) park(w *worker) func() {
	last := time.Since(p.epoch)
	p.mu.Lock()
	defer p.mu.Unlock()
	if f := p.pop(); f != nil {
		return f
	}
	if p.closed {
		return nil
	}
	w.last, w.idle = last, true
	p.idle = append(p.idle, w)
	for w.idle {
		w.wake.Wait()
	}
	f := w.f
	w.f = nil
	return f
}

// push queues f for the next worker to finish; p.mu is held.
func (p *Pool) push(f func()) {
	if len(p.queue) == cap(p.queue) && p.head > 0 {
		// Reuse the consumed front before growing.
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
	p.queue = append(p.queue, f)
}

// pop takes the oldest queued function, nil when none is; p.mu is held.
func (p *Pool) pop() func() {
	if p.head == len(p.queue) {
		return nil
	}
	f := p.queue[p.head]
	p.queue[p.head] = nil
	p.head++
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
		if cap(p.queue) > 4096 {
			p.queue = nil // a burst's backlog is not kept
		}
	}
	return f
}

// wakeWith hands f (nil: exit) to w, idle and off the stack; p.mu is held.
func (w *worker) wakeWith(f func()) {
	w.f, w.idle = f, false
	w.wake.Signal()
}

// janitor retires workers idle for longer than idleFor.
func (p *Pool) janitor() {
	defer p.wg.Done()
	tick := min(p.idleFor/2, time.Second)
	if tick <= 0 {
		tick = time.Millisecond
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			now := time.Since(p.epoch)
			p.mu.Lock()
			n := 0
			for n < len(p.idle) && now-p.idle[n].last > p.idleFor {
				p.idle[n].wakeWith(nil)
				n++
			}
			m := copy(p.idle, p.idle[n:])
			clear(p.idle[m:])
			p.idle = p.idle[:m]
			p.mu.Unlock()
		}
	}
}

// Close makes idle workers exit and waits for every worker (and function
// started after Close) to finish, the functions queued in a bounded pool
// included, but for as many as are detached: those
// exit on their own if their functions ever return. Calling Go after
// Close still runs f.
func (p *Pool) Close() {
	p.once.Do(func() {
		p.mu.Lock()
		p.closed = true
		for _, w := range p.idle {
			w.wakeWith(nil)
		}
		p.idle = nil
		p.mu.Unlock()
		close(p.stop)
	})
	p.wg.Wait() // the janitor
	p.mu.Lock()
	for p.live+p.late > p.detached {
		p.exited.Wait()
	}
	p.mu.Unlock()
}
