package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/actors"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/ratelimit"
)

// What every entry point (run.go, gather.go, group.go, submit.go,
// nested.go) shares: the run scope, the depth check and task
// preparation.
//
// A run reads what it inherits from two values of its context: the
// svc.Scope every package shares (the caller's depth, trace and span, set
// by the invocation whose tool starts it, the request id, the progress
// callback) and runScope, the runtime's own state of the request it
// belongs to, under a key of this package. Each is written anew only
// where it changes, so a plain Run or Gather allocates neither.

// runScope is the runtime's state of one request: what every run nested
// in it shares. It travels in the context under runKey, typed, where no
// other package can read or replace it (it used to ride in svc.Scope as an
// untyped field any package could overwrite). It is never modified once
// in a context; a change makes a copy.
type runScope struct {
	// budget is the cap of the top-level run (nil: none), shared by the
	// runs nested in it (budget.go).
	budget *actors.Budget
	// progress counts the invocations of the request, nested runs' too
	// (nil: nobody watches).
	progress *actors.Progress
	// sink receives a submitted run's run events (nil for other runs).
	sink actors.RunSink
	// path is the names of the agents that spawned the run of the context,
	// outermost first, ending with that run's own agent (spawn_agents'
	// cycle check).
	path []string
	// rounds counts a team run's delegate calls (nil outside a team run).
	rounds *atomic.Int64
	// runID is the submitted run the request belongs to ("" for a
	// synchronous call): what a cancel broadcast to the fleet names.
	runID string
	// nested is set for a spawned child or a team's delegate and the runs
	// inside them: what a NestedDispatcher sends to the fleet.
	nested bool
}

// runKey is the context key of the runScope.
type runKey struct{}

// noRun is the runScope of a context that has none. It is shared and
// never modified (changes copy it), so reading a bare context allocates
// nothing.
var noRun = &runScope{}

// runOf returns ctx's runScope, never nil.
func runOf(ctx context.Context) *runScope {
	if rs, ok := ctx.Value(runKey{}).(*runScope); ok {
		return rs
	}
	return noRun
}

// scopeOf returns ctx's scope and its runScope, never nil.
func scopeOf(ctx context.Context) (svc.Scope, *runScope) {
	return svc.ScopeFrom(ctx), runOf(ctx)
}

// withRun returns ctx with rs as its runScope.
func withRun(ctx context.Context, rs *runScope) context.Context {
	return context.WithValue(ctx, runKey{}, rs)
}

// enter is the start of a request or of a run nested in one: it returns
// ctx with the request's progress counter in its runScope, made here when
// the enclosing request has none, and the scopes. Without a progress
// callback it changes nothing and allocates nothing. (The run's token cap
// is put in the runScope before, by withCap.)
func (rt *Runtime) enter(ctx context.Context) (context.Context, svc.Scope, *runScope) {
	s, rs := scopeOf(ctx)
	if rs.progress != nil || s.Progress == nil {
		return ctx, s, rs
	}
	next := *rs
	next.progress = actors.NewProgress(s.Progress)
	return withRun(ctx, &next), s, &next
}

// withRunSink returns ctx for a submitted run: its invocations, nested
// ones included, report their run events to sink and its progress to
// progress.
func withRunSink(ctx context.Context, runID string, sink actors.RunSink, progress svc.ProgressFunc) context.Context {
	next := *runOf(ctx)
	next.runID = runID
	next.sink = sink
	// The submitted run counts its own invocations; its counter is made
	// here so that enter has nothing left to add. The callback goes in
	// the shared scope too, where a tool of the run finds it
	// (svc.ProgressFrom).
	next.progress = actors.NewProgress(progress)
	return withRun(svc.WithProgress(ctx, progress), &next)
}

// withSpawn returns ctx for a child spawned along path.
func withSpawn(ctx context.Context, path []string) context.Context {
	next := *runOf(ctx)
	next.path, next.nested = path, true
	return withRun(ctx, &next)
}

// withNested returns ctx for a team's delegate.
func withNested(ctx context.Context) context.Context {
	rs := runOf(ctx)
	if rs.nested {
		return ctx
	}
	next := *rs
	next.nested = true
	return withRun(ctx, &next)
}

// withRounds returns ctx for a team run, counting its delegate calls.
func withRounds(ctx context.Context) context.Context {
	next := *runOf(ctx)
	next.rounds = new(atomic.Int64)
	return withRun(ctx, &next)
}

// prepare assigns ids and checks the input of one task. index is the task's
// place in a gather, or -1 for a single run.
func prepare(c *agent.Compiled, task svc.TaskSpec, trace string, index int) (actors.Task, error) {
	t := actors.Task{ID: task.ID, Trace: task.RequestID, Input: task.Input}
	if t.ID == "" {
		t.ID = newID()
	}
	if t.Trace == "" {
		t.Trace = trace
	}
	if t.Trace == "" {
		t.Trace = newID()
	}
	if len(t.Input) == 0 {
		t.Input = json.RawMessage("null")
	}
	err := task.CheckTokenBudget()
	if err == nil {
		err = task.CheckPriority()
	}
	if err == nil {
		t.Priority, _ = ratelimit.ParsePriority(task.Priority)
	}
	if err != nil {
		if index >= 0 {
			err = svc.Errorf(svc.KindSpecValidation, "tasks[%d]: %s", index, err.(*svc.Error).Message)
		}
		return t, err
	}
	if err := c.ValidateInput(t.Input); err != nil {
		if index >= 0 {
			var e *svc.Error
			if errors.As(err, &e) {
				e2 := *e
				e2.Message = fmt.Sprintf("tasks[%d]: %s", index, e.Message)
				e2.TaskID = t.ID
				return t, &e2
			}
		}
		return t, err
	}
	return t, nil
}

// checkDepth finds the depth of a new run from its scope (one below the
// invocation that starts it) and refuses it past max_spawn_depth, emitting
// depth_limit_exceeded first, under the span of the invocation that asked.
func (rt *Runtime) checkDepth(s *svc.Scope, name string, t actors.Task) (int, error) {
	depth := s.Depth + 1
	if depth <= rt.opts.MaxSpawnDepth {
		return depth, nil
	}
	rt.emitter.Emit(svc.RuntimeEvent{
		EventType: svc.EventDepthLimitExceeded, Timestamp: time.Now().UTC(), AgentName: name,
		TaskID: t.ID, TraceID: t.Trace, ParentTraceID: s.ParentTrace, ParentSpanID: s.ParentSpan,
		Payload: svc.Payload{"limit": rt.opts.MaxSpawnDepth, "depth": depth},
	})
	return 0, &svc.Error{Kind: svc.KindDepthLimit, Agent: name, TaskID: t.ID, Reason: "depth_limit",
		Message: fmt.Sprintf("%s: spawn depth %d exceeds max_spawn_depth %d", name, depth, rt.opts.MaxSpawnDepth)}
}

// isRejection reports whether a failed invocation of this kind is an error
// of the call rather than a failed result (docs/api.md, "Errors").
func isRejection(k svc.Kind) bool {
	switch k {
	case svc.KindTimeout, svc.KindBudgetExceeded, svc.KindDepthLimit, svc.KindSpawnCycle, svc.KindSpawnCap, svc.KindApprovalRequired, svc.KindCancelled, svc.KindShuttingDown:
		return true
	}
	return false
}

// published returns res as it leaves the runtime: its typed error given
// its wire form.
func published(res []svc.AgentResult) []svc.AgentResult {
	for i := range res {
		res[i].Publish()
	}
	return res
}
