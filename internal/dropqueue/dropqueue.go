// Package dropqueue is a bounded queue with one consumer goroutine whose Put
// never blocks: what does not fit is dropped and counted, so a slow consumer
// (a terminal, a pipe, a database) never stalls the producer (the runtime).
// emitters.Async and the event store's emitter are both built on it.
package dropqueue

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures New. Zero fields take the defaults.
type Config struct {
	// Size is how many items may wait for the consumer; 1 when < 1.
	Size int
	// Batch is the most items handed to the consumer in one call; 1 when
	// < 1.
	Batch int
	// Linger, when > 0, holds a partial batch until its first item has
	// waited that long or the batch is full, so that the consumer gets
	// full batches under load and still gets every item promptly when
	// idle. When 0 the consumer gets what is waiting, up to Batch, at
	// once.
	Linger time.Duration
}

// Queue is a bounded drop-and-count queue. Put is safe for concurrent use;
// the consume function runs on the queue's one goroutine, one call at a
// time, in Put order.
type Queue[T any] struct {
	consume func([]T)
	batch   int
	linger  time.Duration

	ch      chan T
	mu      sync.RWMutex // orders Put's send against Close's close(ch)
	closed  bool
	once    sync.Once
	dropped atomic.Int64
	// abandon is closed when a Close gives up waiting: the goroutine then
	// drops what is left instead of consuming it.
	abandon     chan struct{}
	abandonOnce sync.Once
	done        chan struct{}
}

// New starts the goroutine that hands queued items to consume. consume
// must not keep the slice it is given: it is reused for the next batch.
func New[T any](cfg Config, consume func(batch []T)) *Queue[T] {
	cfg.Size = max(cfg.Size, 1)
	cfg.Batch = max(cfg.Batch, 1)
	q := &Queue[T]{
		consume: consume,
		batch:   cfg.Batch,
		linger:  max(cfg.Linger, 0),
		ch:      make(chan T, cfg.Size),
		abandon: make(chan struct{}),
		done:    make(chan struct{}),
	}
	go q.run()
	return q
}

// Put queues v and reports whether it did; when the queue is full or
// closed v is dropped and counted instead. It never blocks.
func (q *Queue[T]) Put(v T) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		q.dropped.Add(1)
		return false
	}
	select {
	case q.ch <- v:
		return true
	default:
		q.dropped.Add(1)
		return false
	}
}

// Dropped is the number of items dropped so far: on a full queue, after
// Close, or left over when a Close gave up waiting.
func (q *Queue[T]) Dropped() int64 { return q.dropped.Load() }

// Len is the number of items waiting (not counting a batch being
// consumed).
func (q *Queue[T]) Len() int { return len(q.ch) }

// Close stops taking items, hands what is queued to the consumer, and
// returns once the goroutine has finished. If ctx ends first it returns
// ctx's error at once: the goroutine drops what is still queued (counting
// it) and stops after the consume call in progress, if any, returns. Later
// Puts are dropped. Close may be called more than once, and concurrently.
func (q *Queue[T]) Close(ctx context.Context) error {
	q.once.Do(func() {
		q.mu.Lock()
		q.closed = true
		close(q.ch)
		q.mu.Unlock()
	})
	select {
	case <-q.done:
		return nil
	case <-ctx.Done():
		q.abandonOnce.Do(func() { close(q.abandon) })
		return ctx.Err()
	}
}

// Done is closed once the goroutine has finished, after Close.
func (q *Queue[T]) Done() <-chan struct{} { return q.done }

func (q *Queue[T]) abandoned() bool {
	select {
	case <-q.abandon:
		return true
	default:
		return false
	}
}

func (q *Queue[T]) run() {
	defer close(q.done)
	buf := make([]T, 0, q.batch)
	var timer *time.Timer
	var tick <-chan time.Time
	if q.linger > 0 {
		timer = time.NewTimer(q.linger)
		timer.Stop()
		defer timer.Stop()
	}
	flush := func() {
		if timer != nil {
			timer.Stop() // Go ≥ 1.23: no stale tick survives Stop
			tick = nil
		}
		if len(buf) == 0 {
			return
		}
		if q.abandoned() {
			q.dropped.Add(int64(len(buf)))
		} else {
			q.consume(buf)
		}
		clear(buf) // do not pin what was consumed
		buf = buf[:0]
	}
	for {
		select {
		case v, ok := <-q.ch:
			if !ok {
				flush()
				return
			}
			buf = append(buf, v)
			if q.linger == 0 {
				// Take what else is waiting, up to a batch, then hand it on.
				q.fill(&buf)
				flush()
				continue
			}
			if len(buf) >= q.batch {
				flush()
			} else if len(buf) == 1 {
				timer.Reset(q.linger)
				tick = timer.C
			}
		case <-tick:
			flush()
		}
	}
}

// fill appends queued items to buf without waiting, up to a batch.
func (q *Queue[T]) fill(buf *[]T) {
	for len(*buf) < q.batch {
		select {
		case v, ok := <-q.ch:
			if !ok {
				return // run sees the close on its next receive
			}
			*buf = append(*buf, v)
		default:
			return
		}
	}
}
