package supervisor

import (
	"context"
	"errors"
	"iter"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
	"github.com/svc-dev/svc/agent"
)

// The streamed gather: GatherStream → a shard spawns one run actor for the
// batch (actors.StartRun with Stream) → a feeder goroutine reads the tasks
// and sends them to it, never more than the window ahead of the results
// the caller has taken → up to maxConcurrency invocation actors at a time
// → each result to the caller as it finishes.
//
// The window is credits: the feeder takes one before it sends a task and
// the caller gives it back when it has taken that task's result, so tasks
// read but unanswered plus results not yet taken never exceed
// maxConcurrency + svc.ReadAhead(maxConcurrency), whatever the batch's
// size, and the run actor's sends to Out (of that capacity) never block.

// GatherStream implements svc.GatherStreamer.
func (rt *Runtime) GatherStream(ctx context.Context, name string, tasks iter.Seq[svc.TaskSpec], maxConcurrency int) iter.Seq2[svc.GatherItem, error] {
	return func(yield func(svc.GatherItem, error) bool) {
		if err := rt.gatherStream(ctx, name, tasks, maxConcurrency, yield); err != nil {
			yield(svc.GatherItem{}, err)
		}
	}
}

// gatherStream runs the stream, yielding its results; the error it
// returns, if any, is yielded last (never after yield returned false).
func (rt *Runtime) gatherStream(ctx context.Context, name string, tasks iter.Seq[svc.TaskSpec], maxConcurrency int,
	yield func(svc.GatherItem, error) bool) error {
	c, err := rt.lookup(name)
	if err != nil {
		return err
	}
	conc, err := svc.CheckGatherConcurrency(maxConcurrency)
	if err != nil {
		return err
	}
	if tasks == nil {
		return svc.Wrap(svc.KindSpecValidation, svc.ErrNoTasks, "gather")
	}
	batch := svc.RequestIDFrom(ctx)
	if batch == "" {
		batch = newID()
	}
	if err := rt.refuseSpent(ctx, name, "", batch); err != nil {
		return err
	}
	ctx, s, rs := rt.enter(ctx)
	depth, err := rt.checkDepth(&s, c.Def.Name, actors.Task{Trace: batch})
	if err != nil {
		return err
	}
	if err := rt.admit(); err != nil {
		return err
	}
	defer rt.leave()
	rt.runs.Add(1)
	defer rt.runs.Add(-1)

	// runCtx ends the run early (the caller stopped taking results);
	// feedCtx stops the feeder (the run ended or was cancelled).
	runCtx, cancelRun := context.WithCancelCause(ctx)
	defer cancelRun(nil)
	feedCtx, stopFeed := context.WithCancel(runCtx)
	defer stopFeed()

	window := conc + svc.ReadAhead(conc)
	out := make(chan svc.GatherItem, window)
	ready := make(chan *actor.PID, 1)
	reply := make(chan actors.RunReply, 1)
	req := &actors.StartRun{
		Ctx: runCtx, Agent: c, MaxConcurrency: conc, Depth: depth, Batch: true, BatchTrace: batch,
		ParentTrace: s.ParentTrace, ParentSpan: s.ParentSpan,
		Budget: rs.budget, Progress: rs.progress, Sink: rs.sink, Deltas: s.Deltas, Reply: reply,
		Stream: &actors.Stream{Out: out, Ready: ready, Stop: stopFeed},
	}
	rt.system.Root.Send(rt.shard(), req)
	pid := <-ready // Started always comes first, and sends it

	credit := make(chan struct{}, window)
	var exhausted bool
	fed := make(chan struct{})
	go func() {
		defer close(fed)
		exhausted = rt.feed(feedCtx, ctx, c, tasks, batch, rs.budget == nil, credit, pid)
	}()

	taking := true
	for item := range out {
		<-credit // its task took one before it was sent
		if !taking {
			continue // draining: the run is cancelled, its tasks fail fast
		}
		item.Result.Publish()
		item.More = len(out) > 0
		if !yield(item, nil) {
			taking = false
			cancelRun(context.Canceled)
		}
	}
	stopFeed()
	<-fed
	r := <-reply
	switch {
	case !taking:
		return nil
	case r.Err != nil:
		return r.Err
	case !exhausted || ctx.Err() != nil:
		// The batch was cut short: some tasks were never read, or the
		// caller's context ended (the tasks in flight then failed).
		cause := context.Cause(runCtx)
		if cause == nil {
			cause = context.Canceled
		}
		if errors.Is(cause, context.DeadlineExceeded) {
			return svc.Wrap(svc.KindTimeout, cause, "gather "+name)
		}
		return svc.Wrap(svc.KindCancelled, cause, "gather "+name)
	}
	return nil
}

// feed reads tasks and sends each to the run actor at pid, taking a credit
// first, then ends the stream. It reports whether it read every task.
// ctx is the request's (with its scope), for the tasks' own caps.
func (rt *Runtime) feed(feedCtx, ctx context.Context, c *agent.Compiled, tasks iter.Seq[svc.TaskSpec], batch string,
	capped bool, credit chan<- struct{}, pid *actor.PID) (exhausted bool) {
	defer rt.system.Root.Send(pid, actors.StreamEnd{})
	i := 0
	for task := range tasks {
		select {
		case credit <- struct{}{}:
		case <-feedCtx.Done():
			return false
		}
		m := &actors.StreamTask{Index: i}
		if task.Invalid != nil {
			m.Task = actors.Task{ID: task.ID, Trace: task.RequestID}
			if m.Task.ID == "" {
				m.Task.ID = newID()
			}
			if m.Task.Trace == "" {
				m.Task.Trace = batch
			}
			m.Err = task.Invalid
			if _, ok := errors.AsType[*svc.Error](m.Err); !ok {
				m.Err = svc.Wrap(svc.KindSpecValidation, m.Err, "")
			}
		} else {
			m.Task, m.Err = prepare(c, task, batch, i)
			if m.Err == nil && capped {
				// Each task is a run with a cap of its own, as in Gather.
				if tctx := rt.withCap(ctx, &task); tctx != ctx {
					m.Task.Ctx = tctx
					m.Task.Budget = runOf(tctx).budget
				}
			}
		}
		rt.system.Root.Send(pid, m)
		i++
		if feedCtx.Err() != nil {
			return false
		}
	}
	return true
}

var _ svc.GatherStreamer = (*Runtime)(nil)
