// Package plain is the reference run path: what the runtime does for Run
// and Gather, written as plain goroutines, context.Context and channels.
// It has no actors and none of the speed tricks of internal/lean (the
// invocation as its own context, the small mailbox, the bounded
// dispatcher, the goroutine pool). Read it first: the actors in package
// actors do the same, arranged so that a parked run holds under 6 KiB.
//
// It is for reading and for the differential test (plain_test.go), which
// runs the same scenarios through supervisor.Runtime and through Runtime
// here and requires the same results and the same events per run. It is
// not wired into the server, and it leaves out what the test does not
// compare: the runtime's own token budget, submitted runs and their run
// events, groups and teams, spawn_agents, streamed gathers, the
// distributed mode (Env.Execute), and abandoning an attempt that ignores
// its cancelled context (the runtime stops waiting for it after a grace;
// here the run waits).
package plain

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/model"
)

// Runtime runs registered agents the plain way.
type Runtime struct {
	opts    svc.Options
	emitter svc.Emitter // nil: no events
	agents  map[string]*agent.Compiled
}

// New compiles agents against models (each agent gets model instances of
// its own, as in the runtime) and returns a Runtime that emits to em.
func New(opts svc.Options, models *model.Registry, em svc.Emitter, agents ...svc.Agent) (*Runtime, error) {
	rt := &Runtime{opts: opts, emitter: em, agents: map[string]*agent.Compiled{}}
	for _, a := range agents {
		c, err := agent.Compile(a, models)
		if err != nil {
			return nil, fmt.Errorf("plain: agent %s: %w", a.Name, err)
		}
		rt.agents[a.Name] = c
	}
	return rt, nil
}

// task is one prepared task: ids assigned, input defaulted.
type task struct {
	id, trace string
	input     json.RawMessage
	budget    *budget // the run's token cap (nil: none)
}

// Run runs one task and waits for its result. As the runtime's Run, a
// rejection (timeout, budget, depth, cancel) is also the call's error.
func (rt *Runtime) Run(ctx context.Context, name string, spec svc.TaskSpec) (svc.AgentResult, error) {
	c, ok := rt.agents[name]
	if !ok {
		return svc.AgentResult{}, svc.Errorf(svc.KindRegistry, "agent %q is not registered", name)
	}
	t := prepare(spec, svc.RequestIDFrom(ctx))
	if err := c.ValidateInput(t.input); err != nil {
		return svc.AgentResult{}, err
	}
	scope := svc.ScopeFrom(ctx)
	depth, err := rt.checkDepth(scope, name, t)
	if err != nil {
		return svc.AgentResult{}, err
	}
	t.budget = rt.capFor(ctx, &spec)
	res := rt.invoke(ctx, c, t, scope, depth, scope.ParentSpan)
	if res.Err != nil && isRejection(svc.KindOf(res.Err)) {
		res.Publish()
		return res, res.Err
	}
	res.Publish()
	return res, nil
}

// Gather runs tasks on one agent, at most maxConcurrency at once, and
// returns their results in task order, between batch_started and
// batch_completed.
func (rt *Runtime) Gather(ctx context.Context, name string, specs []svc.TaskSpec, maxConcurrency int) ([]svc.AgentResult, error) {
	c, ok := rt.agents[name]
	if !ok {
		return nil, svc.Errorf(svc.KindRegistry, "agent %q is not registered", name)
	}
	conc, err := svc.CheckGatherConcurrency(maxConcurrency)
	if err != nil {
		return nil, err
	}
	if len(specs) == 0 {
		return nil, svc.Wrap(svc.KindSpecValidation, svc.ErrNoTasks, "gather")
	}
	batch := svc.RequestIDFrom(ctx)
	if batch == "" {
		batch = newID()
	}
	scope := svc.ScopeFrom(ctx)
	depth, err := rt.checkDepth(scope, name, task{trace: batch})
	if err != nil {
		return nil, err
	}
	tasks := make([]task, len(specs))
	for i := range specs {
		tasks[i] = prepare(specs[i], batch)
		tasks[i].budget = rt.capFor(ctx, &specs[i])
	}
	conc = min(conc, len(tasks))
	span := rt.spanID()
	rt.emit(svc.RuntimeEvent{EventType: svc.EventBatchStarted, AgentName: name, TraceID: batch,
		ParentTraceID: scope.ParentTrace, SpanID: span, ParentSpanID: scope.ParentSpan,
		Payload: svc.Payload{"task_count": len(tasks), "max_concurrency": conc}})

	// A semaphore of conc slots bounds the invocations in flight; each
	// writes its own result slot.
	results := make([]svc.AgentResult, len(tasks))
	slots := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range tasks {
		slots <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			results[i] = rt.invoke(ctx, c, tasks[i], scope, depth, span)
		}()
	}
	wg.Wait()

	succeeded := 0
	for i := range results {
		if results[i].Success {
			succeeded++
		}
		results[i].Publish()
	}
	rt.emit(svc.RuntimeEvent{EventType: svc.EventBatchCompleted, AgentName: name, TraceID: batch,
		ParentTraceID: scope.ParentTrace, SpanID: span, ParentSpanID: scope.ParentSpan,
		Payload: svc.Payload{"task_count": len(tasks), "success_count": succeeded, "failure_count": len(tasks) - succeeded}})
	return results, nil
}

// invoke is one invocation: its attempts, under one deadline, and its
// result. parentSpan is the batch's span in a gather, else the caller's.
func (rt *Runtime) invoke(ctx context.Context, c *agent.Compiled, t task, scope svc.Scope, depth int, parentSpan string) svc.AgentResult {
	start := time.Now()
	// The invocation's context: the caller's, with the run's cap in it
	// for the runs its tools start, cancelled at the deadline with the
	// cause context.DeadlineExceeded, or when the caller's ends with the
	// caller's cause. It is a cancel context with a timer rather than
	// context.WithTimeout, as the runtime's is: its Err is
	// context.Canceled whatever the cause, and error messages say so.
	ctx = context.WithValue(ctx, capKey{}, t.budget)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	deadline := time.AfterFunc(rt.opts.Timeout(), func() { cancel(context.DeadlineExceeded) })
	defer deadline.Stop()

	inv := &agent.Invocation{
		Agent: c, Input: t.input, TaskID: t.id, TraceID: t.trace,
		ParentTraceID: scope.ParentTrace, ParentSpanID: parentSpan,
		Depth: int32(depth), Emitter: rt.emitter, SpanID: rt.spanID(),
	}
	if t.budget != nil {
		inv.Budget = &invBudget{b: t.budget, inv: inv, em: rt.emitter}
	}
	rt.emitInv(inv, svc.EventAgentSpawned, svc.Payload{"backend": svc.BackendLocal, "trust_level": string(c.Def.Trust())})

	var (
		out      agent.Outcome
		err      error
		tokens   int64
		cost     float64
		modelID  string
		tried    []string
		unpriced bool
		cached   int64
		attempt  int
	)
	for attempt = 1; ; attempt++ {
		if d := rt.opts.Backoff(attempt); d > 0 && !sleep(ctx, d) {
			out, err = agent.Outcome{}, ctx.Err()
		} else {
			out, err = runAttempt(ctx, inv)
		}
		tokens += out.TokensUsed
		cost += out.CostUSD
		if out.Model != "" {
			modelID = out.Model
		}
		if len(out.ModelsTried) > 0 {
			tried = out.ModelsTried
		}
		unpriced = unpriced || out.CostUnknown
		cached += int64(out.CachedTokens)
		if err == nil || ctx.Err() != nil || !retryable(err) || attempt >= rt.opts.RetryMaxAttempts {
			break
		}
	}

	res := svc.AgentResult{AgentName: c.Def.Name, TaskID: t.id, Metadata: svc.ResultMetadata{
		TraceID: t.trace, TokensUsed: tokens, CostUSD: cost, Model: modelID, Attempts: attempt,
		Backend: svc.BackendLocal, ModelsTried: tried, CostUnknown: unpriced, CachedTokens: cached,
		DurationMS: float64(time.Since(start).Microseconds()) / 1000,
	}}
	if err == nil {
		res.Success, res.Output = true, out.Output
		rt.emitInv(inv, svc.EventAgentCompleted, svc.Payload{"duration_ms": res.Metadata.DurationMS,
			"tokens_used": tokens, "backend": svc.BackendLocal, "model": modelID, "cost_usd": cost})
		return res
	}
	err = describe(err, context.Cause(ctx), c.Def.Name, t.id, rt.opts.Timeout())
	res.Err = err
	p := svc.Payload{"duration_ms": res.Metadata.DurationMS, "error": err.Error(), "backend": svc.BackendLocal,
		"reason": string(svc.KindOf(err))}
	if m := modelID; m != "" {
		p["model"] = m
	} else if n := len(tried); n > 0 {
		p["model"] = tried[n-1]
	}
	rt.emitInv(inv, svc.EventAgentFailed, p)
	return res
}

// runAttempt runs the agent loop once, turning a panic in user code (a
// tool, a hook, a model) into an error.
func runAttempt(ctx context.Context, inv *agent.Invocation) (out agent.Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = svc.Errorf(svc.KindRuntime, "agent %s panicked: %v", inv.Agent.Def.Name, p)
		}
	}()
	return agent.Run(ctx, inv)
}

// sleep waits d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// describe gives the ends of the invocation's context their reasons: the
// deadline is a timeout, the caller's end a cancel.
func describe(err, cause error, name, taskID string, timeout time.Duration) error {
	if errors.Is(cause, svc.ErrShuttingDown) {
		return &svc.Error{Kind: svc.KindShuttingDown, Reason: "shutting_down", Agent: name, TaskID: taskID, Err: err,
			Message: fmt.Sprintf("agent %s: cancelled: the runtime is shutting down", name)}
	}
	switch kind := svc.KindOf(err); {
	case kind == svc.KindTimeout || errors.Is(err, context.DeadlineExceeded) || errors.Is(cause, context.DeadlineExceeded):
		return &svc.Error{Kind: svc.KindTimeout, Reason: "timeout", Agent: name, TaskID: taskID, Err: err,
			Message: fmt.Sprintf("agent %s: timed out after %v", name, timeout)}
	case kind == svc.KindCancelled || errors.Is(err, context.Canceled):
		return &svc.Error{Kind: svc.KindCancelled, Reason: "cancelled", Agent: name, TaskID: taskID, Err: err,
			Message: fmt.Sprintf("agent %s: cancelled", name)}
	}
	return err
}

// retryable reports whether another attempt could succeed: not a
// rejection, not the end of the run's context, not a provider error no
// other call can fix.
func retryable(err error) bool {
	if !model.CanFallback(err) {
		return false
	}
	switch svc.KindOf(err) {
	case svc.KindBudgetExceeded, svc.KindDepthLimit, svc.KindSpawnCycle, svc.KindSpawnCap, svc.KindApprovalRequired, svc.KindTrustViolation,
		svc.KindSpecValidation, svc.KindTopology, svc.KindRegistry, svc.KindTimeout, svc.KindCancelled:
		return false
	}
	return true
}

// isRejection: a failed run of this kind is the call's error too.
func isRejection(k svc.Kind) bool {
	switch k {
	case svc.KindTimeout, svc.KindBudgetExceeded, svc.KindDepthLimit, svc.KindSpawnCycle, svc.KindSpawnCap, svc.KindApprovalRequired, svc.KindCancelled, svc.KindShuttingDown:
		return true
	}
	return false
}

// checkDepth refuses a run past max_spawn_depth, emitting
// depth_limit_exceeded, and returns the run's depth otherwise.
func (rt *Runtime) checkDepth(s svc.Scope, name string, t task) (int, error) {
	depth := s.Depth + 1
	if depth <= rt.opts.MaxSpawnDepth {
		return depth, nil
	}
	rt.emit(svc.RuntimeEvent{EventType: svc.EventDepthLimitExceeded, AgentName: name, TaskID: t.id, TraceID: t.trace,
		ParentTraceID: s.ParentTrace, ParentSpanID: s.ParentSpan,
		Payload: svc.Payload{"limit": rt.opts.MaxSpawnDepth, "depth": depth}})
	return 0, &svc.Error{Kind: svc.KindDepthLimit, Agent: name, TaskID: t.id, Reason: "depth_limit",
		Message: fmt.Sprintf("%s: spawn depth %d exceeds max_spawn_depth %d", name, depth, rt.opts.MaxSpawnDepth)}
}

// prepare assigns a task its ids: its own, else the trace given (the
// request id, a gather's batch id), else new ones.
func prepare(spec svc.TaskSpec, trace string) task {
	t := task{id: spec.ID, trace: spec.RequestID, input: spec.Input}
	if t.id == "" {
		t.id = newID()
	}
	if t.trace == "" {
		t.trace = trace
	}
	if t.trace == "" {
		t.trace = newID()
	}
	if len(t.input) == 0 {
		t.input = json.RawMessage("null")
	}
	return t
}

func (rt *Runtime) emit(ev svc.RuntimeEvent) {
	if rt.emitter != nil {
		ev.Timestamp = time.Now().UTC()
		rt.emitter.Emit(ev)
	}
}

func (rt *Runtime) emitInv(inv *agent.Invocation, t svc.EventType, p svc.Payload) {
	rt.emit(svc.RuntimeEvent{EventType: t, AgentName: inv.Agent.Def.Name, TaskID: inv.TaskID, TraceID: inv.TraceID,
		ParentTraceID: inv.ParentTraceID, SpanID: inv.SpanID, ParentSpanID: inv.ParentSpanID, Payload: p})
}

// spanID is a new span id, or none when nothing listens.
func (rt *Runtime) spanID() string {
	if rt.emitter == nil {
		return ""
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
