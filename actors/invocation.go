package actors

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/internal/lean"
	"github.com/svc-dev/svc/model"
)

// invState is an invocation's state that survives restarts: protoactor
// builds a new actor value on each restart, and the attempt count, the
// clock and the tokens spent so far belong to the invocation, not to one
// attempt. It is also the invocation's context.Context (see ctx.go): the
// context its attempts run with, which the run actor cancels.
type invState struct {
	run  *StartRun
	task *Task
	// out is this invocation's result, allocated when it finishes: a run
	// in flight holds no result.
	out *svc.AgentResult
	// index is the task's place in its batch (where its result goes).
	index int

	// Ctx is the cancel state of the invocation's context (ctx.go),
	// which derives from base().
	lean.Ctx
	// start (on the monotonic clock, since clockEpoch) is set by the run
	// actor, which enforces the deadline (start plus the timeout: not
	// stored); finished is the run actor's too. The struct is kept at
	// 416 bytes (a million parked runs hold a million of them): what only
	// some invocations need (when the run stops waiting for one,
	// reapEntry; the cause of a cancel, lean.Ctx's extra) or what its
	// run or task has (the Env, the base context) is not stored here, and
	// the small fields are packed together.
	start time.Duration
	// pid is the invocation actor's: the run actor's abandonAttempt and
	// the attempt's report go to it.
	pid *actor.PID
	// state is the attempt's (attemptRunning, ...): set by the
	// invocation actor, settled by its goroutine or by abandon.
	state    atomic.Int32
	attempt  int32
	finished bool
	unpriced bool // some model call had no price
	// replay says what a previous life of the invocation's submitted run
	// recorded of it (replay.go): nothing, its start, or its outcome.
	replay replayMark
	// cached is the input tokens read from prompt caches, saturating: an
	// int32 fits in the padding after the bools, keeping invState at 416
	// bytes.
	cached int32
	tokens int64
	cost   float64
	model  string
	tried  []string // models called by the last attempt, in order

	// inv and done are reused by every attempt: one attempt runs at a time,
	// and its goroutine hands done over by message before the next starts.
	inv  agent.Invocation
	done workDone
}

// IgnoreDeadLetterLogging: an *invState is also the message that reports a
// finished invocation to its run actor, which may have stopped meanwhile.
func (*invState) IgnoreDeadLetterLogging() {}

// workDone carries an attempt's outcome from its goroutine back to the
// invocation actor.
type workDone struct {
	out agent.Outcome
	err error
}

// A late workDone for an invocation that already stopped is expected after a
// cancel; it is not worth a dead-letter log line.
func (*workDone) IgnoreDeadLetterLogging() {}

// retry is the reason an invocation fails on purpose so that its supervisor
// restarts it for another attempt.
type retry struct{ err error }

func (r *retry) String() string { return "retry after: " + r.err.Error() }

// invocation is the actor of one agent invocation. It starts blank: its
// state comes as its first message, from the run actor that spawned it, or
// after a restart from its previous incarnation (Env.invocationProps).
type invocation struct{ st *invState }

func newInvocation() actor.Actor { return &invocation{} }

func (a *invocation) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *invState:
		a.st = m
		a.startAttempt(c)
	case *workDone:
		a.finishAttempt(c, m)
	case abandonAttempt:
		if a.st != nil {
			a.abandon(c)
		}
	}
}

// abandon stops waiting for the attempt in flight, if there is one and
// its goroutine has not reported yet: the goroutine is detached from the
// pool and the runtime's wait group (whoever waits for them must not
// wait for it), counted as stuck, and the invocation finishes at once
// with its context's end as its error.
func (a *invocation) abandon(c actor.Context) {
	st := a.st
	if st.Err() == nil || !st.state.CompareAndSwap(attemptRunning, attemptAbandoned) {
		return // not ended, or the attempt reported (its message is on its way)
	}
	st.run.env.Work.Done()
	st.run.env.Pool.Detach()
	call := svc.StuckCall{Kind: "agent", Name: st.run.Agent.Def.Name, Agent: st.run.Agent.Def.Name,
		TaskID: st.task.ID, TraceID: st.task.Trace, Reason: reasonOf(st.cause()), AbandonedAt: time.Now().UTC()}
	if step, ok := st.inv.Step(); ok {
		call.Kind, call.Name = step.Kind, step.Name
	}
	st.run.env.Stuck.add(st, call)
	a.finishAttempt(c, &workDone{err: &abandoned{call: call, err: st.Err()}})
}

func (a *invocation) startAttempt(c actor.Context) {
	st := a.st
	st.attempt++
	if st.attempt == 1 {
		// The span id is the invocation's, shared by its attempts; there is
		// none when no emitter listens (nothing would carry it).
		st.inv = agent.Invocation{
			Agent: st.run.Agent, Input: st.task.Input, TaskID: st.task.ID, TraceID: st.task.Trace,
			ParentTraceID: st.run.ParentTrace, ParentSpanID: st.parentSpan(),
			Depth: int32(st.run.Depth), Emitter: st.run.emitter, Priority: st.task.Priority,
		}
		if !st.run.env.Silent {
			st.inv.SpanID = NewSpanID()
		}
		capped := st.run.Budget
		if st.task.Budget != nil {
			capped = st.task.Budget
		}
		st.inv.Budget = Budgets(capped, st.run.env.Budget, &st.inv)
		if st.run.Sink != nil {
			st.replay = st.replayed()
		}
		if st.replay != replayNone {
			// Its start is in the run's history already.
		} else if st.runEvent(svc.RunAgentStarted, ""); !st.run.env.Silent && !st.run.env.remote(st, &st.inv) {
			st.emit(svc.EventAgentSpawned, svc.Payload{
				"backend": st.run.env.BackendName(), "trust_level": string(st.run.Agent.Def.Trust()),
			})
		}
	}
	backoff := st.run.env.Options.Backoff(int(st.attempt))
	st.run.env.Work.Add(1)
	st.state.Store(attemptRunning)
	if backoff > 0 {
		st.run.env.Pool.Go(func() { st.work(backoff) })
	} else {
		st.run.env.Pool.Go(st.workNow)
	}
}

// clockEpoch is what invState.start counts from: a time.Duration rather
// than a time.Time keeps 16 bytes out of every invocation. Reading it
// with time.Since uses the monotonic clock, as time.Since(time.Time) of
// a time.Now does.
var clockEpoch = time.Now()

// sinceEpoch is now, as an invState.start.
func sinceEpoch() time.Duration { return time.Since(clockEpoch) }

// deadline is when the invocation times out.
func (st *invState) deadline() time.Time {
	return clockEpoch.Add(st.start + st.run.env.Options.Timeout())
}

// base is the context the invocation's own derives from: its task's when
// it has one, else its run's, detached from their cancellation (the run
// actor cancels each invocation itself).
func (st *invState) base() context.Context {
	if ctx := st.task.Ctx; ctx != nil {
		return ctx
	}
	return st.run.detached
}

// workNow runs one attempt, without backoff, on a pooled goroutine.
//
// workNow, work and execute keep small frames: a parked attempt (a model
// call waiting on the network, a sleeping test model) holds its goroutine,
// whose stack is these frames plus the agent loop's, and a million parked
// runs should each fit in a 4 KiB stack.
func (st *invState) workNow() {
	d := &st.done
	*d = workDone{}
	if st.replay == replayOutcome {
		st.replayOutcome(d)
	} else {
		execute(st.run.env.Execute, st, &st.inv, d)
	}
	st.report(d)
}

func (st *invState) work(backoff time.Duration) {
	if backoff > 0 && !st.backoff(backoff) {
		d := &st.done
		*d = workDone{err: st.Err()}
		st.report(d)
		return
	}
	st.workNow()
}

// backoff waits d before the next attempt; false means the invocation's
// context ended first.
//
//go:noinline
func (st *invState) backoff(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-st.Done():
		return false
	}
}

// report hands an attempt's outcome to the invocation actor, unless the
// actor abandoned the attempt meanwhile: then nobody waits for it any
// more, and the attempt only stops counting as stuck.
func (st *invState) report(d *workDone) {
	if st.state.CompareAndSwap(attemptRunning, attemptDone) {
		st.run.env.Root.Send(st.pid, d)
		st.run.env.Work.Done()
		return
	}
	st.run.env.Stuck.remove(st)
	st.run.env.Pool.Rejoin()
}

// execute runs one attempt through the Env's Execute, the local agent loop
// when that is nil, into d, turning a panic in user code (a tool, a hook, a
// model) into an error rather than a crashed process.
func execute(run func(context.Context, *agent.Invocation) (agent.Outcome, error), ctx context.Context, inv *agent.Invocation, d *workDone) {
	defer recoverAttempt(inv, d)
	if run == nil {
		d.err = agent.RunInto(ctx, inv, &d.out)
		return
	}
	executeWith(run, ctx, inv, d)
}

// executeWith is execute's call of an Env.Execute, in a frame of its own:
// the Outcome it returns by value would otherwise take room in execute's
// frame, which every parked local attempt holds.
//
//go:noinline
func executeWith(run func(context.Context, *agent.Invocation) (agent.Outcome, error), ctx context.Context, inv *agent.Invocation, d *workDone) {
	d.out, d.err = run(ctx, inv)
}

// recoverAttempt turns a panic of an attempt into its error.
func recoverAttempt(inv *agent.Invocation, d *workDone) {
	if p := recover(); p != nil {
		d.err = svc.Errorf(svc.KindRuntime, "agent %s panicked: %v", inv.Agent.Def.Name, p)
	}
}

func (a *invocation) finishAttempt(c actor.Context, d *workDone) {
	st := a.st
	st.tokens += d.out.TokensUsed
	st.cost += d.out.CostUSD
	if d.out.Model != "" {
		st.model = d.out.Model
	}
	if len(d.out.ModelsTried) > 0 {
		st.tried = d.out.ModelsTried
	}
	st.unpriced = st.unpriced || d.out.CostUnknown
	st.cached = int32(min(int64(st.cached)+int64(d.out.CachedTokens), math.MaxInt32))
	err := d.err
	// An attempt that ran on a worker was retried there already.
	if err != nil && !d.out.Remote && st.Err() == nil && retryable(err) && int(st.attempt) < st.run.env.Options.RetryMaxAttempts {
		// The restarted incarnation gets the state as its first message:
		// the mailbox keeps it while the run actor restarts this one.
		c.Send(c.Self(), st)
		panic(&retry{err: err})
	}
	st.cancel(nil)
	// The result is made now: until it finishes, an invocation holds none
	// (its run keeps a pointer to it, or streams it).
	res := &svc.AgentResult{
		AgentName: st.run.Agent.Def.Name,
		TaskID:    st.task.ID,
		Metadata: svc.ResultMetadata{
			TraceID: st.task.Trace, TokensUsed: st.tokens, CostUSD: st.cost, Model: st.model,
			Attempts: int(st.attempt), Backend: st.run.env.BackendName(),
			ModelsTried: st.tried, CostUnknown: st.unpriced, CachedTokens: int64(st.cached),
		},
	}
	dur := sinceEpoch() - st.start
	res.Metadata.DurationMS = ms(dur)
	if err == nil {
		res.Success = true
		res.Output = d.out.Output
		if st.replay == replayStarted && st.endedBefore() {
			// Its completion is in the history: the previous life died
			// after reporting it and before recording its outcome.
			st.replay = replayOutcome
			st.recordOutcome(&d.out)
		}
		if st.replay == replayOutcome {
			// Replayed: its events are in the history already.
		} else if st.runEvent(svc.RunAgentCompleted, ""); st.run.Sink != nil {
			st.recordOutcome(&d.out)
		}
		if st.replay != replayOutcome && !st.run.env.Silent && !d.out.Remote {
			p := svc.Payload{
				"duration_ms": res.Metadata.DurationMS, "tokens_used": st.tokens,
				"backend": res.Metadata.Backend, "model": st.model,
				// The result's own figure (svc.PayloadKeys).
				"cost_usd": res.Metadata.CostUSD,
			}
			if st.cached > 0 {
				p["cached_tokens"] = int64(st.cached)
			}
			st.emit(svc.EventAgentCompleted, p)
		}
	} else {
		// The typed error travels with the result; its wire form (ErrorInfo)
		// is built where the result leaves the runtime.
		err = st.describe(err)
		res.Err = err
		msg := err.Error()
		p := svc.Payload{"duration_ms": res.Metadata.DurationMS, "error": msg, "backend": res.Metadata.Backend,
			"reason": string(svc.KindOf(err))}
		if m := st.failedModel(); m != "" {
			p["model"] = m
		}
		// A failure a worker reported was emitted there; one of this side
		// (no worker answered in time, the budget, the broker) is emitted
		// here, where it happened.
		if _, paused := svc.Paused(err); paused {
			// Not a failure: the run waits for a person (run_waiting
			// says so), and the invocation goes on when it resumes.
		} else {
			if !d.out.Remote {
				st.emit(svc.EventAgentFailed, p)
			}
			st.runEvent(svc.RunAgentFailed, msg)
		}
	}
	// The message that follows hands the result to the run actor.
	st.out = res
	c.Send(c.Parent(), st)
	c.Stop(c.Self())
}

// describe gives the ends of the invocation's context their reasons: its
// own deadline is a TimeoutError, a cancelled run a CancelledError.
func (st *invState) describe(err error) error {
	name := st.run.Agent.Def.Name
	cause := st.cause()
	// An abandoned attempt says which call did not return.
	var stuck string
	var ab *abandoned
	if errors.As(err, &ab) {
		stuck = fmt.Sprintf(" (%s %s did not return and was abandoned)", ab.call.Kind, ab.call.Name)
	}
	if errors.Is(cause, svc.ErrShuttingDown) {
		return &svc.Error{Kind: svc.KindShuttingDown, Reason: "shutting_down", Agent: name, TaskID: st.task.ID, Err: err,
			Message: fmt.Sprintf("agent %s: cancelled: the runtime is shutting down%s", name, stuck)}
	}
	switch kind := svc.KindOf(err); {
	case kind == svc.KindTimeout || errors.Is(err, context.DeadlineExceeded) || errors.Is(cause, context.DeadlineExceeded):
		return &svc.Error{Kind: svc.KindTimeout, Reason: "timeout", Agent: name, TaskID: st.task.ID, Err: err,
			Message: fmt.Sprintf("agent %s: timed out after %v%s", name, st.run.env.Options.Timeout(), stuck)}
	case kind == svc.KindCancelled || errors.Is(err, context.Canceled):
		return &svc.Error{Kind: svc.KindCancelled, Reason: "cancelled", Agent: name, TaskID: st.task.ID, Err: err,
			Message: fmt.Sprintf("agent %s: cancelled%s", name, stuck)}
	}
	return err
}

// retryable reports whether another attempt could succeed. Rejections
// (budget, depth, trust, bad input), ends of the run's context, and
// provider errors no other call can fix (an invalid request, a bad key)
// are final.
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

// failedModel is the model a failed invocation names: the one that
// answered, else the last one tried, else none (it failed before any call).
func (st *invState) failedModel() string {
	if st.model != "" {
		return st.model
	}
	if n := len(st.tried); n > 0 {
		return st.tried[n-1]
	}
	return ""
}

// parentSpan is the span the invocation names as its parent: its batch's,
// else whatever started its run.
func (st *invState) parentSpan() string {
	if st.run.BatchSpan != "" {
		return st.run.BatchSpan
	}
	return st.run.ParentSpan
}

func (st *invState) emit(t svc.EventType, p svc.Payload) {
	st.run.env.Emitter.Emit(svc.RuntimeEvent{
		EventType: t, Timestamp: time.Now().UTC(), AgentName: st.run.Agent.Def.Name, TaskID: st.task.ID,
		TraceID: st.task.Trace, ParentTraceID: st.run.ParentTrace, SpanID: st.inv.SpanID, ParentSpanID: st.inv.ParentSpanID,
		Payload: p,
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// RunSink receives the run events (agent_started, agent_completed,
// agent_failed) of the invocations of a submitted run. It is called from
// actors: it must not block.
type RunSink func(svc.RunEvent)

func (st *invState) runEvent(t svc.RunEventType, errText string) {
	if sink := st.run.Sink; sink != nil {
		sink(svc.RunEvent{Type: t, Agent: st.run.Agent.Def.Name, TaskID: st.task.ID, Error: errText, Timestamp: time.Now().UTC()})
	}
}
