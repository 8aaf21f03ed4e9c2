package supervisor

import (
	"context"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
)

// The gather entry point: Gather → start → a shard spawns one run actor for
// the batch (actors.StartRun with Batch) → up to maxConcurrency invocation
// actors at a time.

// Gather runs many tasks on one agent, at most maxConcurrency at once, and
// returns the results in task order.
func (rt *Runtime) Gather(ctx context.Context, name string, tasks []svc.TaskSpec, maxConcurrency int) ([]svc.AgentResult, error) {
	c, err := rt.lookup(name)
	if err != nil {
		return nil, err
	}
	conc, err := svc.CheckGatherConcurrency(maxConcurrency)
	if err != nil {
		return nil, err
	}
	if len(tasks) == 0 {
		return nil, svc.Wrap(svc.KindSpecValidation, svc.ErrNoTasks, "gather")
	}
	batch := svc.RequestIDFrom(ctx)
	if batch == "" {
		batch = newID()
	}
	prepared := make([]actors.Task, len(tasks))
	for i, task := range tasks {
		if prepared[i], err = prepare(c, task, batch, i); err != nil {
			return nil, err
		}
	}
	if err := rt.refuseSpent(ctx, name, "", batch); err != nil {
		return nil, err
	}
	ctx, s, rs := rt.enter(ctx)
	depth, err := rt.checkDepth(&s, c.Def.Name, actors.Task{Trace: batch})
	if err != nil {
		return nil, err
	}
	if rs.budget == nil {
		// Each task is a run with a cap of its own; in a gather nested in
		// a capped run, the tasks share that run's cap instead.
		for i := range prepared {
			if tctx := rt.withCap(ctx, &tasks[i]); tctx != ctx {
				prepared[i].Ctx = tctx
				prepared[i].Budget = runOf(tctx).budget
			}
		}
	}
	res, err := rt.start(ctx, &s, rs, &actors.StartRun{
		Agent: c, Tasks: prepared, MaxConcurrency: min(conc, len(prepared)), Depth: depth,
		Batch: true, BatchTrace: batch,
	})
	return published(res), err
}
