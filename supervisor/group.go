package supervisor

import (
	"context"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
	"github.com/svc-dev/svc/supervisor/registry"
)

// The group entry point: RunGroup → a shard spawns the group actor
// (actors.StartGroup) → one run actor per node (or fan-out) → invocation
// actors. A team instead runs its coordinator as a run (runTeam →
// runCompiled, see run.go) whose delegate tool starts nested runs
// (delegate.go).

// RunGroup runs a group on one task and waits for the result.
func (rt *Runtime) RunGroup(ctx context.Context, name string, task svc.TaskSpec) (svc.RunResult, error) {
	reg := rt.reg.Load()
	g, err := reg.LookupGroup(name)
	if err != nil {
		return svc.RunResult{}, err
	}
	if g.Team != nil {
		return rt.runTeam(ctx, g, task)
	}
	// The entry nodes' agents check the input.
	var t actors.Task
	for i, e := range g.Graph.Entry {
		if t, err = prepare(reg.Agents()[g.Graph.Nodes[e].Agent], task, svc.RequestIDFrom(ctx), -1); err != nil {
			return svc.RunResult{}, err
		}
		if i == 0 {
			task.ID, task.RequestID = t.ID, t.Trace // same ids for every entry
		}
	}
	if err := rt.refuseSpent(ctx, name, t.ID, t.Trace); err != nil {
		return svc.RunResult{}, err
	}
	ctx, s, rs := rt.enter(rt.withCap(ctx, &task))
	depth, err := rt.checkDepth(&s, name, t)
	if err != nil {
		return svc.RunResult{}, err
	}
	if err := rt.admit(); err != nil {
		return svc.RunResult{}, err
	}
	defer rt.leave()
	rt.runs.Add(1)
	defer rt.runs.Add(-1)
	reply := make(chan actors.GroupReply, 1)
	rt.system.Root.Send(rt.shard(), &actors.StartGroup{
		Ctx: ctx, Graph: g.Graph, Agents: reg.Agents(), Task: t, Metadata: task.Metadata,
		Depth: depth, ParentTrace: s.ParentTrace, ParentSpan: s.ParentSpan,
		Budget: rs.budget, Progress: rs.progress, Sink: rs.sink, Deltas: s.Deltas, Reply: reply,
	})
	r := <-reply
	if r.Err != nil {
		return svc.RunResult{}, r.Err
	}
	if a := r.Result.Agent; a != nil && a.Err != nil && isRejection(svc.KindOf(a.Err)) {
		return svc.RunResult{}, a.Err
	}
	return publishedRun(r.Result), nil
}

// publishedRun gives every result of r its wire-form error.
func publishedRun(r svc.RunResult) svc.RunResult {
	if r.Agent != nil {
		r.Agent.Publish()
	}
	if r.Group != nil {
		for k, a := range r.Group.Outputs {
			a.Publish()
			r.Group.Outputs[k] = a
		}
	}
	return r
}

// runTeam runs a team: its coordinator, with the delegate tool, as one run;
// delegate calls are nested runs.
func (rt *Runtime) runTeam(ctx context.Context, g *registry.Group, task svc.TaskSpec) (svc.RunResult, error) {
	t, err := prepare(g.Team, task, svc.RequestIDFrom(ctx), -1)
	if err != nil {
		return svc.RunResult{}, err
	}
	if err := rt.refuseSpent(ctx, g.Def.Name, t.ID, t.Trace); err != nil {
		return svc.RunResult{}, err
	}
	ctx = rt.withCap(ctx, &task)
	start := time.Now()
	// The team run is a span of its own: the coordinator's invocation
	// names it as its parent.
	s := svc.ScopeFrom(ctx)
	span := ""
	if !rt.env.Silent {
		span = actors.NewSpanID()
	}
	rt.emitGroup(svc.EventGroupStarted, g.Def.Name, t.Trace, &s, span,
		svc.Payload{"group_name": g.Def.Name, "node_count": 1 + len(g.Def.Delegates)})
	inner := withRounds(ctx)
	if span != "" {
		is := svc.ScopeFrom(inner)
		is.ParentSpan = span
		inner = svc.WithScope(inner, is)
	}
	res, err := rt.runCompiled(inner, g.Team, t)
	rt.emitGroup(svc.EventGroupCompleted, g.Def.Name, t.Trace, &s, span,
		svc.Payload{"group_name": g.Def.Name, "duration_ms": float64(time.Since(start).Microseconds()) / 1000, "success": err == nil && res.Success})
	if err != nil {
		return svc.RunResult{}, err
	}
	res.Publish()
	return svc.RunResult{Agent: &res}, nil
}

func (rt *Runtime) emitGroup(t svc.EventType, name, trace string, s *svc.Scope, span string, p svc.Payload) {
	rt.emitter.Emit(svc.RuntimeEvent{EventType: t, Timestamp: time.Now().UTC(), AgentName: name,
		TraceID: trace, ParentTraceID: s.ParentTrace, SpanID: span, ParentSpanID: s.ParentSpan, Payload: p})
}
