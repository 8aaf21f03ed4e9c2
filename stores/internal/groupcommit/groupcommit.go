// Package groupcommit is the commit queue of the persistent run stores:
// callers enqueue a write and wait; one writer goroutine takes everything
// queued (up to a batch), lets the store write it in one transaction with
// one sync, then releases every caller with its own outcome. A caller is
// answered only after the commit that holds its write, so what a store
// promises of a returned write (it survives a crash) is unchanged; what
// changes is that concurrent writes share the commit's fixed cost.
//
// Batches form by themselves: while one commit runs, the writes that arrive
// queue behind it and make the next batch. Nothing waits on a timer, so a
// lone write costs what it did alone.
package groupcommit

import (
	"context"
	"sync"
	"sync/atomic"
)

// Defaults of Options.
const (
	DefaultMaxBatch = 512
	DefaultQueue    = 4096
)

// Options tune a Queue; the zero value is the defaults.
type Options struct {
	// MaxBatch is the most writes one commit takes (DefaultMaxBatch when
	// 0): it bounds how long a commit holds the store's writer.
	MaxBatch int
	// Queue is how many writes may wait for the writer (DefaultQueue when
	// 0); past it, callers wait to enqueue (back pressure) until their
	// context ends.
	Queue int
	// Writers is how many batches may be in flight at once, each taken
	// and committed by a writer goroutine of its own (1 when 0): more than
	// one only for a store whose commits may overlap (Redis pipelines on
	// separate connections). The writes of overlapping batches were all
	// concurrent (no caller of either had been answered), so no order
	// between them was promised.
	Writers int
}

// Job is one caller's write in a batch. The commit function sets Err, the
// caller's answer, for each job it is given.
type Job[T any] struct {
	// Ctx is the caller's context. A job whose context ended before its
	// batch began is answered with the context's error and never given to
	// the commit function; the commit itself is not bound by any one
	// caller's context, as a batch belongs to all of them.
	Ctx  context.Context
	Op   T
	Err  error
	done chan struct{}
}

// Queue is a commit queue; its owner stops it with Close.
type Queue[T any] struct {
	ch     chan *Job[T]
	max    int
	commit func([]*Job[T])
	closed func() error

	// mu orders Do's check-and-send against Close: once Close holds it,
	// no send is under way, so the writer's final drain sees every job.
	mu       sync.RWMutex
	stopping bool
	quit     chan struct{}
	stopped  chan struct{}
	pending  atomic.Int64
	sent     atomic.Int64
}

// New starts a queue's writer. commit writes a batch (in order) and sets
// each job's Err; closed is the error of a Do after Close.
func New[T any](o Options, commit func(batch []*Job[T]), closed func() error) *Queue[T] {
	if o.MaxBatch <= 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	o.Writers = max(o.Writers, 1)
	q := &Queue[T]{ch: make(chan *Job[T], o.Queue), max: o.MaxBatch, commit: commit, closed: closed,
		quit: make(chan struct{}), stopped: make(chan struct{})}
	var wg sync.WaitGroup
	for range o.Writers {
		wg.Go(q.run)
	}
	go func() {
		wg.Wait()
		close(q.stopped)
	}()
	return q
}

// Do enqueues op and waits until the commit that holds it is done, and
// returns its Err. When ctx ends first, Do returns ctx.Err(): the write may
// then still be committed, as a write cut short may be on any store.
func (q *Queue[T]) Do(ctx context.Context, op T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	j := &Job[T]{Ctx: ctx, Op: op, done: make(chan struct{})}
	q.mu.RLock()
	if q.stopping {
		q.mu.RUnlock()
		return q.closed()
	}
	q.pending.Add(1)
	select {
	case q.ch <- j:
		q.sent.Add(1)
	case <-ctx.Done():
		q.pending.Add(-1)
		q.mu.RUnlock()
		return ctx.Err()
	}
	q.mu.RUnlock()
	select {
	case <-j.done:
		return j.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Pending is how many writes were enqueued and not answered yet: queued,
// or in the batch being committed.
func (q *Queue[T]) Pending() int { return int(q.pending.Load()) }

// Sent is how many writes have been handed to the writer in all (Pending
// counts a write from before it is handed over).
func (q *Queue[T]) Sent() int64 { return q.sent.Load() }

// Close commits what is queued, stops the writer and waits for it; later
// calls of Do fail with the closed error. It is idempotent.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	if !q.stopping {
		q.stopping = true
		close(q.quit)
	}
	q.mu.Unlock()
	<-q.stopped
}

func (q *Queue[T]) run() {
	batch := make([]*Job[T], 0, q.max)
	for {
		select {
		case j := <-q.ch:
			batch = append(batch[:0], j)
		case <-q.quit:
			// No Do is sending any more (Close holds mu past the flag):
			// what is in the channel is all there will be.
			for {
				batch = batch[:0]
				for len(batch) < q.max {
					select {
					case j := <-q.ch:
						batch = append(batch, j)
						continue
					default:
					}
					break
				}
				if len(batch) == 0 {
					return
				}
				q.flush(batch)
			}
		}
	fill:
		for len(batch) < q.max {
			select {
			case j := <-q.ch:
				batch = append(batch, j)
			default:
				break fill
			}
		}
		q.flush(batch)
	}
}

// flush commits the live jobs of batch and answers every job.
func (q *Queue[T]) flush(batch []*Job[T]) {
	live := make([]*Job[T], 0, len(batch))
	for _, j := range batch {
		if err := j.Ctx.Err(); err != nil {
			j.Err = err
			q.pending.Add(-1)
			close(j.done)
			continue
		}
		live = append(live, j)
	}
	if len(live) > 0 {
		q.commit(live)
	}
	for _, j := range live {
		q.pending.Add(-1)
		close(j.done)
	}
	clear(batch) // drop the references until the slots are reused
}
