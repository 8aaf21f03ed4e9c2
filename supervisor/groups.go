package supervisor

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
	"github.com/svc-dev/svc/agent"
)

// Groups lists the registered group names, sorted.
func (rt *Runtime) Groups(context.Context) ([]string, error) {
	return slices.Clone(rt.agents.Load().groupNames), nil
}

func (rt *Runtime) lookupGroup(reg *registry, name string) (*compiledGroup, error) {
	g, ok := reg.groups[name]
	if !ok {
		return nil, &svc.Error{Kind: svc.KindRegistry, Message: fmt.Sprintf("unknown group %q", name)}
	}
	return g, nil
}

// Group returns a copy of a registered group's definition.
func (rt *Runtime) Group(name string) (svc.Group, bool) {
	g, ok := rt.agents.Load().groups[name]
	if !ok {
		return svc.Group{}, false
	}
	return g.def.Clone(), true
}

// GroupTopology describes a registered group.
func (rt *Runtime) GroupTopology(_ context.Context, name string) (svc.Topology, error) {
	g, err := rt.lookupGroup(rt.agents.Load(), name)
	if err != nil {
		return svc.Topology{}, err
	}
	return g.graph.Topology(), nil
}

// RunGroup runs a group on one task and waits for the result.
func (rt *Runtime) RunGroup(ctx context.Context, name string, task svc.TaskSpec) (svc.RunResult, error) {
	reg := rt.agents.Load()
	g, err := rt.lookupGroup(reg, name)
	if err != nil {
		return svc.RunResult{}, err
	}
	if g.team != nil {
		return rt.runTeam(ctx, g, task)
	}
	// The entry nodes' agents check the input.
	var t actors.Task
	for i, e := range g.graph.Entry {
		if t, err = prepare(reg.byName[g.graph.Nodes[e].Agent], task, svc.RequestIDFrom(ctx), -1); err != nil {
			return svc.RunResult{}, err
		}
		if i == 0 {
			task.ID, task.RequestID = t.ID, t.Trace // same ids for every entry
		}
	}
	depth, err := rt.checkDepth(ctx, name, t)
	if err != nil {
		return svc.RunResult{}, err
	}
	if err := rt.admit(); err != nil {
		return svc.RunResult{}, err
	}
	defer rt.inflight.Done()
	ctx, budget := rt.withBudget(ctx)
	reply := make(chan actors.GroupReply, 1)
	rt.system.Root.Send(rt.shard(), &actors.StartGroup{
		Ctx: ctx, Graph: g.graph, Agents: reg.byName, Task: t, Metadata: task.Metadata,
		Depth: depth, ParentTrace: svc.ParentTraceFrom(ctx), Budget: budget,
		Progress: actors.NewProgress(svc.ProgressFrom(ctx)), Reply: reply,
	})
	r := <-reply
	if r.Err != nil {
		return svc.RunResult{}, r.Err
	}
	if a := r.Result.Agent; a != nil && a.Error != nil && isRejection(svc.Kind(a.Error.Type)) {
		return svc.RunResult{}, &svc.Error{Kind: svc.Kind(a.Error.Type), Message: a.Error.Message,
			Reason: a.Error.Reason, Agent: a.AgentName, TaskID: a.TaskID}
	}
	return r.Result, nil
}

// runTeam runs a team: its coordinator, with the delegate tool, as one run;
// delegate calls are nested runs.
func (rt *Runtime) runTeam(ctx context.Context, g *compiledGroup, task svc.TaskSpec) (svc.RunResult, error) {
	t, err := prepare(g.team, task, svc.RequestIDFrom(ctx), -1)
	if err != nil {
		return svc.RunResult{}, err
	}
	start := time.Now()
	rt.emitGroup(svc.EventGroupStarted, g.def.Name, t.Trace, ctx,
		svc.Payload{"group_name": g.def.Name, "node_count": 1 + len(g.def.Delegates)})
	ctx = context.WithValue(ctx, roundsKey{}, new(atomic.Int64))
	res, err := rt.runCompiled(ctx, g.team, t)
	rt.emitGroup(svc.EventGroupCompleted, g.def.Name, t.Trace, ctx,
		svc.Payload{"group_name": g.def.Name, "duration_ms": float64(time.Since(start).Microseconds()) / 1000})
	if err != nil {
		return svc.RunResult{}, err
	}
	return svc.RunResult{Agent: &res}, nil
}

func (rt *Runtime) emitGroup(t svc.EventType, name, trace string, ctx context.Context, p svc.Payload) {
	rt.emitter.Emit(svc.RuntimeEvent{EventType: t, Timestamp: time.Now().UTC(), AgentName: name,
		TraceID: trace, ParentTraceID: svc.ParentTraceFrom(ctx), Payload: p})
}

// runCompiled runs one prepared task on a compiled agent, as Run does.
func (rt *Runtime) runCompiled(ctx context.Context, c *agent.Compiled, t actors.Task) (svc.AgentResult, error) {
	depth, err := rt.checkDepth(ctx, c.Def.Name, t)
	if err != nil {
		return svc.AgentResult{}, err
	}
	res, err := rt.start(ctx, &actors.StartRun{Agent: c, Tasks: []actors.Task{t}, MaxConcurrency: 1, Depth: depth})
	if err != nil {
		return svc.AgentResult{}, err
	}
	r := res[0]
	if r.Error != nil && isRejection(svc.Kind(r.Error.Type)) {
		// Rejections and the run's own timeout are errors of the call, not
		// failed results (DESIGN.md, "Failures inside an agent run").
		return svc.AgentResult{}, &svc.Error{Kind: svc.Kind(r.Error.Type), Message: r.Error.Message,
			Reason: r.Error.Reason, Agent: c.Def.Name, TaskID: r.TaskID}
	}
	return r, nil
}

func isRejection(k svc.Kind) bool {
	switch k {
	case svc.KindTimeout, svc.KindBudgetExceeded, svc.KindDepthLimit, svc.KindSpawnCycle, svc.KindCancelled, svc.KindShuttingDown:
		return true
	}
	return false
}
