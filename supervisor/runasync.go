package supervisor

import (
	"context"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
)

// runAsync is Run without a goroutine waiting for the reply: it starts
// the run and calls done with what Run would have returned. done is
// called at once for a call refused before it starts, otherwise on the
// run actor's goroutine when the run ends; it must not block. The
// message API uses it so that a run asked for by message parks no
// goroutine (a goroutine per run was most of what the message path
// added to a run).
func (rt *Runtime) runAsync(ctx context.Context, name string, task svc.TaskSpec, done func(svc.AgentResult, error)) {
	c, err := rt.lookup(name)
	if err != nil {
		done(svc.AgentResult{}, err)
		return
	}
	t, err := prepare(c, task, svc.RequestIDFrom(ctx), -1)
	if err != nil {
		done(svc.AgentResult{}, err)
		return
	}
	if err := rt.refuseSpent(ctx, name, t.ID, t.Trace); err != nil {
		done(svc.AgentResult{}, err)
		return
	}
	// As runCompiled and start, with the reply handed to a callback.
	ctx, s, rs := rt.enter(rt.withCap(ctx, &task))
	finish := func(r svc.AgentResult, err error) {
		r.Publish()
		done(r, err)
	}
	depth, err := rt.checkDepth(&s, c.Def.Name, t)
	if err != nil {
		finish(svc.AgentResult{}, err)
		return
	}
	if err := rt.admit(); err != nil {
		finish(svc.AgentResult{}, err)
		return
	}
	rt.runs.Add(1)
	req := &actors.StartRun{Agent: c, Tasks: []actors.Task{t}, MaxConcurrency: 1, Depth: depth, Ctx: ctx,
		ParentTrace: s.ParentTrace, ParentSpan: s.ParentSpan, Budget: rs.budget, Progress: rs.progress, Sink: rs.sink, Deltas: s.Deltas}
	req.Done = func(rr actors.RunReply) {
		// As Run, the call stops counting in InFlight before its caller has
		// the answer; Shutdown still waits until the answer is sent.
		rt.active.Add(-1)
		rt.runs.Add(-1)
		defer rt.inflight.Done()
		if rr.Err != nil {
			finish(svc.AgentResult{}, rr.Err)
			return
		}
		r := rr.Results[0]
		if r.Err != nil && isRejection(svc.KindOf(r.Err)) {
			finish(r, r.Err)
			return
		}
		finish(r, nil)
	}
	rt.system.Root.Send(rt.shard(), req)
}
