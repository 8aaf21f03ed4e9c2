package eventstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
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
	batch int
	flush time.Duration
	ch    chan svc.RuntimeEvent

	mu      sync.RWMutex // orders Emit's send against Close's close(ch)
	closed  bool
	once    sync.Once
	done    chan struct{}
	dropped atomic.Int64
	// closeErr collects write errors during Close's final flush.
	closeErr []error
	closing  atomic.Bool
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
	e := &Emitter{store: s, batch: batch, flush: flush,
		ch: make(chan svc.RuntimeEvent, queue), done: make(chan struct{})}
	go e.run()
	return e
}

// Emit queues ev, or drops and counts it when the queue is full or e is
// closed.
func (e *Emitter) Emit(ev svc.RuntimeEvent) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		e.dropped.Add(1)
		return
	}
	select {
	case e.ch <- ev:
	default:
		e.dropped.Add(1)
	}
}

// Dropped is the number of events that never reached the store: dropped
// on a full queue, emitted after Close, or lost with a failed Write.
func (e *Emitter) Dropped() int64 { return e.dropped.Load() }

// Close writes every queued event, then stops the goroutine. Later emits
// are dropped. It returns the errors of the writes of that final flush,
// and is safe to call more than once (later calls return nil).
func (e *Emitter) Close() error {
	first := false
	e.once.Do(func() {
		first = true
		e.mu.Lock()
		e.closed = true
		e.closing.Store(true)
		close(e.ch)
		e.mu.Unlock()
	})
	<-e.done
	if !first {
		return nil
	}
	return errors.Join(e.closeErr...)
}

func (e *Emitter) run() {
	defer close(e.done)
	buf := make([]svc.RuntimeEvent, 0, e.batch)
	timer := time.NewTimer(e.flush)
	timer.Stop()
	defer timer.Stop()
	write := func() {
		timer.Stop()
		if len(buf) == 0 {
			return
		}
		if err := e.store.Write(context.Background(), buf); err != nil {
			e.dropped.Add(int64(len(buf)))
			if e.closing.Load() {
				e.closeErr = append(e.closeErr, err)
			}
		}
		// The store may not keep the slice (see Store.Write), so it can be
		// reused; clear it so written payloads are not pinned.
		clear(buf)
		buf = buf[:0]
	}
	for {
		select {
		case ev, ok := <-e.ch:
			if !ok {
				write()
				return
			}
			buf = append(buf, ev)
			if len(buf) == 1 {
				timer.Reset(e.flush) // Go ≥ 1.23 timers: Reset discards a stale tick
			}
			if len(buf) >= e.batch {
				write()
			}
		case <-timer.C:
			write()
		}
	}
}
