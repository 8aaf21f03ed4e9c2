package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/fleetwire"
)

// Batches of tasks (fleetwire.Batch, sent by a publisher once every live
// worker of the agent announced "batches": true).
//
// The tasks of a batch run as slots free up, each as a task of its own
// (deadline, cancel, events, deltas); each result joins the queue of its
// publisher's inbox, which goes out many results to a message. The batch
// is acked once every one of its results is published, and given back
// (Nack) if one could not be or the worker shuts down before running them
// all: the broker then delivers the whole batch again, and the publisher
// drops the second result of a task that had already answered. So a task
// of a batch whose worker died may run twice, as a single task may; its
// run sees one result.

// maxResultsPerMessage bounds the results of one message besides
// fleetwire.MaxBatchBytes.
const maxResultsPerMessage = 1024

// handleBatch runs the tasks of a batch delivery, then acks it.
func (w *Worker) handleBatch(ctx context.Context, d *svc.Delivery) {
	b, err := fleetwire.DecodeBatch(d.Data)
	if err == nil && b.Kind != fleetwire.MsgTasks {
		err = fmt.Errorf("batch: kind %q on a task subject", b.Kind)
	}
	if err == nil && len(w.cfg.Keys) > 0 {
		err = b.Verify(w.cfg.Keys)
	}
	var envs []fleetwire.Envelope
	if err == nil {
		envs, err = b.Envelopes()
	}
	if err != nil {
		w.reject(ctx, d, nil, err)
		return
	}
	// One look-up of the cancels recorded on the broker per run, not per
	// task: a run found cancelled is remembered, and track refuses its
	// tasks.
	looked := map[string]bool{}
	for i := range envs {
		if id := envs[i].RunID; id != "" && !looked[id] {
			looked[id] = true
			w.cancelledOnBroker(ctx, &envs[i])
		}
	}
	var (
		wg     sync.WaitGroup
		failed atomic.Bool // a task handed back or a result not published
	)
	for i := range envs {
		if failed.Load() {
			break // the batch goes back anyway: start nothing more
		}
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			failed.Store(true) // shutting down: give the batch back
			continue
		}
		if failed.Load() {
			<-w.slots
			break
		}
		env := &envs[i]
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, deltas, handedBack := w.run(ctx, env, false)
			<-w.slots
			if handedBack {
				failed.Store(true)
				return
			}
			if err := w.sendResult(env, res, d.Attempt, deltas); err != nil {
				w.log.Error("result not published; the batch goes back to the broker", zap.String("task_id", env.TaskID),
					zap.String("run_id", env.RunID), zap.Error(err))
				failed.Store(true)
			}
		}()
	}
	wg.Wait()
	w.settle(ctx, d, !failed.Load())
}

// deadBatch answers every task of a batch the broker gave up on with a
// failed result, so their runs fail with the reason.
func (w *Worker) deadBatch(dl svc.DeadLetter) {
	b, err := fleetwire.DecodeBatch(dl.Data)
	if err != nil || b.Kind != fleetwire.MsgTasks {
		return
	}
	if len(w.cfg.Keys) > 0 && b.Verify(w.cfg.Keys) != nil {
		return
	}
	envs, err := b.Envelopes()
	if err != nil {
		return
	}
	var wg sync.WaitGroup
	for i := range envs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env := &envs[i]
			if err := w.sendResult(env, w.deadLettered(env, dl), dl.Deliveries, 0); err != nil {
				w.log.Error("dead-letter result not published", zap.String("task_id", env.TaskID), zap.Error(err))
			}
		}()
	}
	wg.Wait()
}

// resultQueue holds the results waiting to go to one publisher's inbox.
type resultQueue struct {
	subject string
	queue   []*pendingResult // guarded by Worker.rmu
	running bool             // a flusher runs; guarded by Worker.rmu
}

type pendingResult struct {
	item []byte
	done chan error
}

// sendResult queues the result of a task of a batch for its publisher's
// inbox and waits until the message carrying it is published (nil) or
// could not be.
func (w *Worker) sendResult(env *fleetwire.Envelope, res svc.AgentResult, delivery, deltas int) error {
	out := fleetwire.Envelope{TaskID: env.TaskID, RunID: env.RunID, TraceID: env.TraceID, SpanID: env.SpanID,
		Agent: env.Agent, Attempt: env.Attempt, Result: &res, Delivery: delivery, DeltaCount: deltas}
	item, err := fleetwire.EncodeItem(fleetwire.MsgResults, &out)
	if err != nil {
		return err
	}
	r := &pendingResult{item: item, done: make(chan error, 1)}
	w.rmu.Lock()
	q := w.results[env.ReplyTo]
	if q == nil {
		q = &resultQueue{subject: env.ReplyTo}
		w.results[env.ReplyTo] = q
	}
	q.queue = append(q.queue, r)
	start := !q.running
	if start {
		q.running = true
		w.flushers.Add(1)
	}
	w.rmu.Unlock()
	if start {
		go w.flushResults(q)
	}
	return <-r.done
}

// flushResults publishes q's results, many to a message, one message at a
// time, until the queue is empty.
func (w *Worker) flushResults(q *resultQueue) {
	defer w.flushers.Done()
	for {
		w.rmu.Lock()
		n, size := 0, 0
		for n < len(q.queue) && n < maxResultsPerMessage {
			if n > 0 && size+len(q.queue[n].item) > fleetwire.MaxBatchBytes {
				break
			}
			size += len(q.queue[n].item) + 1
			n++
		}
		if n == 0 {
			q.running = false
			w.rmu.Unlock()
			return
		}
		taken := q.queue[:n:n]
		q.queue = append([]*pendingResult(nil), q.queue[n:]...)
		w.rmu.Unlock()
		bw := fleetwire.NewBatchWriter(fleetwire.MsgResults, "", "", w.cfg.RuntimeID)
		for _, r := range taken {
			bw.Add(r.item)
		}
		data, err := bw.Seal(w.cfg.SignKeyID, w.cfg.SignKey)
		if err == nil {
			err = w.publishReply(q.subject, data)
		}
		for _, r := range taken {
			r.done <- err
		}
	}
}

// publishReply publishes a result message to subject, retrying a publish
// that did not fail permanently a few times within resultPublishTimeout.
func (w *Worker) publishReply(subject string, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), resultPublishTimeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	for {
		err := w.cfg.Broker.Publish(ctx, subject, data)
		if err == nil || svc.IsPermanentBrokerError(err) {
			return err // a closed broker, too large a result: no retry mends it
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
			backoff = min(2*backoff, time.Second)
		}
	}
}
