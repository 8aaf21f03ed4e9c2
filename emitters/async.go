package emitters

import (
	"context"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/dropqueue"
)

// Async decouples an emitter that may block (one that writes to a file, a
// pipe or a terminal) from the runtime: Emit only puts the event in a
// bounded queue, and one goroutine feeds the inner emitter. When the queue
// is full the event is dropped and counted, so a stalled consumer never
// stalls a run. Close stops the goroutine after draining the queue.
type Async struct {
	q *dropqueue.Queue[svc.RuntimeEvent]
}

// DefaultAsyncQueue is the queue length NewAsync uses for size <= 0.
const DefaultAsyncQueue = 4096

// NewAsync starts the goroutine that feeds inner; size is the queue length.
func NewAsync(inner svc.Emitter, size int) *Async {
	if size <= 0 {
		size = DefaultAsyncQueue
	}
	return &Async{q: dropqueue.New(dropqueue.Config{Size: size}, func(evs []svc.RuntimeEvent) {
		for _, ev := range evs {
			emitContained(inner, ev)
		}
	})}
}

// Emit queues ev, or drops it when the queue is full or a is closed.
func (a *Async) Emit(ev svc.RuntimeEvent) { a.q.Put(ev) }

// Dropped is the number of events dropped so far.
func (a *Async) Dropped() int64 { return a.q.Dropped() }

// Close delivers what is queued, then stops the goroutine. Later emits are
// dropped. It is safe to call more than once.
func (a *Async) Close() { _ = a.q.Close(context.Background()) }

// Shutdown is Close bounded by ctx: when ctx ends before the queue is
// drained it returns ctx's error, and what is still queued is dropped
// (and counted) instead of delivered.
func (a *Async) Shutdown(ctx context.Context) error { return a.q.Close(ctx) }
