package emitters

import (
	"sync"
	"sync/atomic"

	"github.com/svc-dev/svc"
)

// Async decouples an emitter that may block (one that writes to a file, a
// pipe or a terminal) from the runtime: Emit only puts the event in a
// bounded queue, and one goroutine feeds the inner emitter. When the queue
// is full the event is dropped and counted, so a stalled consumer never
// stalls a run. Close stops the goroutine after draining the queue.
type Async struct {
	inner   svc.Emitter
	ch      chan svc.RuntimeEvent
	mu      sync.RWMutex // guards closed against Emit racing Close
	closed  bool
	dropped atomic.Int64
	done    chan struct{}
	once    sync.Once
}

// DefaultAsyncQueue is the queue length NewAsync uses for size <= 0.
const DefaultAsyncQueue = 4096

// NewAsync starts the goroutine that feeds inner; size is the queue length.
func NewAsync(inner svc.Emitter, size int) *Async {
	if size <= 0 {
		size = DefaultAsyncQueue
	}
	a := &Async{inner: inner, ch: make(chan svc.RuntimeEvent, size), done: make(chan struct{})}
	go a.run()
	return a
}

func (a *Async) run() {
	defer close(a.done)
	for ev := range a.ch {
		emitContained(a.inner, ev)
	}
}

// Emit queues ev, or drops it when the queue is full or a is closed.
func (a *Async) Emit(ev svc.RuntimeEvent) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a.closed {
		a.dropped.Add(1)
		return
	}
	select {
	case a.ch <- ev:
	default:
		a.dropped.Add(1)
	}
}

// Dropped is the number of events dropped so far.
func (a *Async) Dropped() int64 { return a.dropped.Load() }

// Close delivers what is queued, then stops the goroutine. Later emits are
// dropped. It is safe to call more than once.
func (a *Async) Close() {
	a.once.Do(func() {
		a.mu.Lock()
		a.closed = true
		close(a.ch)
		a.mu.Unlock()
	})
	<-a.done
}
