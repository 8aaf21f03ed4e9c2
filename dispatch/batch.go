package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
)

// Batches: many tasks of one agent in one broker message.
//
// A task dispatched while its agent's previous publish is still on its
// way waits in the agent's queue; when the publish returns, everything
// queued goes out as one message (up to the batch limit and
// fleetwire.MaxBatchBytes). Under load a message carries hundreds of
// tasks and costs one publish, one delivery, one signature and one ack
// for all of them; a lone task goes out at once, as the single envelope
// it always was, so a quiet publisher's latency does not change.

// batchPublishTimeout bounds the publication of one batch, retries
// included; the tasks' own callers may give up sooner.
const batchPublishTimeout = 30 * time.Second

// errWithdrawn says a task left its queue before its batch was published:
// no worker has it.
var errWithdrawn = errors.New("dispatch: task withdrawn before its batch was published")

// queued is one task waiting in a batcher.
type queued struct {
	env  *fleetwire.Envelope
	item []byte     // env encoded as a batch item
	done chan error // the publish's outcome; buffered
	// state: queuedWaiting, then queuedTaken by the flusher or
	// queuedWithdrawn by its caller (whose context ended first).
	state atomic.Int32
}

const (
	queuedWaiting int32 = iota
	queuedTaken
	queuedWithdrawn
)

// batcher is the queue of one task subject; its flusher goroutine runs
// while the queue is not empty.
type batcher struct {
	subject, agent string
	queue          []*queued // guarded by Publisher.mu
	running        bool      // a flusher runs; guarded by Publisher.mu
}

// batchLimit is how many tasks of agent one message may carry now: 1 (no
// batches) unless batches are on and some live worker serves agent and
// every live worker serving it announced that it takes batches; then as
// many as would wait about batchWait for slots on the smallest such
// worker, at most MaxBatch.
func (p *Publisher) batchLimit(agent string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.batchLimitLocked(agent)
}

func (p *Publisher) batchLimitLocked(agent string) int {
	if p.cfg.MaxBatch <= 1 {
		return 1
	}
	conc, served := int64(0), false
	now := p.cfg.Now()
	for _, w := range p.workers {
		if p.cfg.Health.Status(w.seen, w.stopped, now) == svc.WorkerDown || !contains(w.agents, agent) {
			continue
		}
		if !w.batches {
			return 1 // a worker of an earlier release would refuse a batch
		}
		if !served || w.concurrency < conc {
			conc = w.concurrency
		}
		served = true
	}
	if !served {
		return 1
	}
	// A batch's tasks wait on a busy worker until as many of its slots
	// free up; slots free at concurrency / duration a second, so k tasks
	// wait about k * duration / concurrency. Keep that under batchWait,
	// for the smallest worker: echo-fast tasks go hundreds to a message,
	// 200 ms tasks one by one (which costs them nothing: the broker's
	// share of a slow task is small), and no worker sits on a batch while
	// others idle. Until a result says how long the agent's tasks take,
	// they go one by one.
	d, ok := p.durations[agent]
	if !ok {
		return 1
	}
	k := float64(batchWait) / float64(time.Millisecond) * float64(max(conc, 1)) / max(d, 1e-3)
	return int(max(1, min(k, float64(p.cfg.MaxBatch))))
}

// batchWait bounds how long the tasks of a batch should wait for slots on
// a busy worker (see batchLimitLocked).
const batchWait = 5 * time.Millisecond

// noteDuration folds the run time of a task of agent (its result's
// duration_ms, on the worker) into the agent's moving average; p.mu is
// held.
func (p *Publisher) noteDuration(agent string, ms float64) {
	if agent == "" || ms < 0 {
		return
	}
	if d, ok := p.durations[agent]; ok {
		p.durations[agent] = d + (ms-d)/16
		return
	}
	p.durations[agent] = ms
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// enqueue queues q for subject's next message and waits until that
// message is published (nil), failed (the broker's error) or ctx ends
// (ctx's error; the task may have been published if its message was on
// its way).
func (p *Publisher) enqueue(ctx context.Context, subject, agent string, q *queued) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return svc.Errorf(svc.KindShuttingDown, "dispatch: publisher closed")
	}
	b := p.batchers[subject]
	if b == nil {
		b = &batcher{subject: subject, agent: agent}
		p.batchers[subject] = b
	}
	b.queue = append(b.queue, q)
	start := !b.running
	if start {
		b.running = true
		p.bg.Add(1)
	}
	p.mu.Unlock()
	if start {
		go p.flush(b)
	}
	select {
	case err := <-q.done:
		return err
	case <-ctx.Done():
		if q.state.CompareAndSwap(queuedWaiting, queuedWithdrawn) {
			return fmt.Errorf("%w: %w", errWithdrawn, ctx.Err())
		}
		// On its way: its outcome no longer matters to the caller, who
		// cancels the task in case it was published.
		return ctx.Err()
	}
}

// flush publishes b's queue, one message at a time, until it is empty.
func (p *Publisher) flush(b *batcher) {
	defer p.bg.Done()
	for {
		p.mu.Lock()
		limit := p.batchLimitLocked(b.agent)
		var taken []*queued
		size, i := 0, 0
		for ; i < len(b.queue) && len(taken) < limit; i++ {
			q := b.queue[i]
			if len(taken) > 0 && size+len(q.item) > fleetwire.MaxBatchBytes {
				break
			}
			if !q.state.CompareAndSwap(queuedWaiting, queuedTaken) {
				continue // withdrawn
			}
			taken = append(taken, q)
			size += len(q.item) + 1
		}
		rest := copy(b.queue, b.queue[i:])
		clear(b.queue[rest:])
		b.queue = b.queue[:rest]
		if len(taken) == 0 {
			b.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		err := p.publishBatch(b, taken)
		for _, q := range taken {
			q.done <- err
		}
	}
}

// publishBatch publishes taken as one message: the single envelope when
// it is one task, a batch otherwise.
func (p *Publisher) publishBatch(b *batcher, taken []*queued) error {
	var data []byte
	var err error
	if len(taken) == 1 {
		data, err = p.encode(taken[0].env)
	} else {
		w := fleetwire.NewBatchWriter(fleetwire.MsgTasks, b.agent, p.inbox, "")
		for _, q := range taken {
			w.Add(q.item)
		}
		data, err = w.Seal(p.cfg.SignKeyID, p.cfg.SignKey)
	}
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(p.closeCtx, batchPublishTimeout)
	defer cancel()
	return p.publish(ctx, b.subject, data)
}
