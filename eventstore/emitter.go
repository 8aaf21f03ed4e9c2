package eventstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/internal/dropqueue"
)

// Emitter defaults.
const (
	// DefaultBatch is the batch size NewEmitter uses for batch <= 0.
	DefaultBatch = 256
	// DefaultFlush is the flush interval NewEmitter uses for flush <= 0.
	DefaultFlush = time.Second
	// DefaultQueue is the least number of events the emitter queues while
	// a write is in progress; the queue holds at least four batches.
	DefaultQueue = 8192
)

// Emitter is the store emitter adapter: an svc.Emitter that writes events
// to a Store. Emit only appends to a bounded queue and never blocks; when
// the queue is full (the store is slower than the runtime) the event is
// dropped and counted. One goroutine writes batches of up to batch events,
// and writes a partial batch once its first event has waited flush, so an
// idle runtime's events still reach the store promptly.
//
// A failed Write loses its batch: the events are counted in Dropped. The
// Emitter does not own the store; close the Emitter first, then the store.
type Emitter struct {
	store Store
	q     *dropqueue.Queue[svc.RuntimeEvent]

	// failed counts the events of failed writes.
	failed atomic.Int64
	// closing is set when Close begins: the writes from then on are the
	// final flush, whose errors Close returns.
	closing  atomic.Bool
	mu       sync.Mutex
	closeErr []error
	first    atomic.Bool
}

var _ svc.Emitter = (*Emitter)(nil)

// NewEmitter starts the goroutine that writes to s.
func NewEmitter(s Store, batch int, flush time.Duration) *Emitter {
	if batch <= 0 {
		batch = DefaultBatch
	}
	return newEmitter(s, batch, flush, max(DefaultQueue, 4*batch))
}

func newEmitter(s Store, batch int, flush time.Duration, queue int) *Emitter {
	if flush <= 0 {
		flush = DefaultFlush
	}
	e := &Emitter{store: s}
	e.q = dropqueue.New(dropqueue.Config{Size: queue, Batch: batch, Linger: flush}, e.write)
	return e
}

// write stores one batch; the queue reuses the slice afterwards, which
// Store.Write allows (it does not keep it).
func (e *Emitter) write(evs []svc.RuntimeEvent) {
	if err := e.store.Write(context.Background(), evs); err != nil {
		e.failed.Add(int64(len(evs)))
		if e.closing.Load() {
			e.mu.Lock()
			e.closeErr = append(e.closeErr, err)
			e.mu.Unlock()
		}
	}
}

// Emit queues ev, or drops and counts it when the queue is full or e is
// closed. agent_delta events are not stored: they are live only (a
// streamed answer's text is in the run's result), and storing them would
// multiply the store's writes by the fragments of every answer.
func (e *Emitter) Emit(ev svc.RuntimeEvent) {
	if ev.EventType == svc.EventAgentDelta {
		return
	}
	e.q.Put(ev)
}

// Dropped is the number of events that never reached the store: dropped
// on a full queue, emitted after Close, or lost with a failed Write.
func (e *Emitter) Dropped() int64 { return e.q.Dropped() + e.failed.Load() }

// Close writes every queued event, then stops the goroutine. Later emits
// are dropped. It returns the errors of the writes of that final flush,
// and is safe to call more than once (later calls return nil).
func (e *Emitter) Close() error { return e.Shutdown(context.Background()) }

// Shutdown is Close bounded by ctx: when ctx ends before the queue is
// written it returns ctx's error, and the events still queued are dropped
// (and counted) instead of written. A write in progress is not
// interrupted; the store's own Close is what ends it.
func (e *Emitter) Shutdown(ctx context.Context) error {
	e.closing.Store(true)
	if err := e.q.Close(ctx); err != nil {
		return err
	}
	if !e.first.CompareAndSwap(false, true) {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.closeErr...)
}
