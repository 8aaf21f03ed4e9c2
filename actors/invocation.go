package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/model"
)

// invState is an invocation's state that survives restarts: protoactor
// builds a new actor value on each restart, and the attempt count, the
// clock and the tokens spent so far belong to the invocation, not to one
// attempt.
type invState struct {
	env  *Env
	run  *StartRun
	task *Task
	out  *svc.AgentResult // this invocation's slot in the run's results

	// ctx, cancel and start are set by the run actor, which enforces the
	// deadline (start plus the timeout: not stored, which keeps this
	// struct in a smaller size class); finished is the run actor's too.
	ctx      context.Context
	cancel   context.CancelCauseFunc
	start    time.Time
	finished bool
	attempt  int
	tokens   int64
	cost     float64
	model    string
	tried    []string // models called by the last attempt, in order
	unpriced bool     // some model call had no price
	self     *actor.PID
	root     *actor.RootContext

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

// invocation is the actor of one agent invocation.
type invocation struct{ st *invState }

func (a *invocation) Receive(c actor.Context) {
	switch m := c.Message().(type) {
	case *actor.Started:
		a.startAttempt(c)
	case *workDone:
		a.finishAttempt(c, m)
	}
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
			Depth: st.run.Depth, Emitter: st.env.Emitter,
		}
		if !st.env.Silent {
			st.inv.SpanID = NewSpanID()
		}
		capped := st.run.Budget
		if st.task.Budget != nil {
			capped = st.task.Budget
		}
		st.inv.Budget = Budgets(capped, st.env.Budget, &st.inv)
		st.runEvent(svc.RunAgentStarted, "")
		if !st.env.Silent && !st.env.Remote {
			st.emit(svc.EventAgentSpawned, svc.Payload{
				"backend": st.env.BackendName(), "trust_level": string(st.run.Agent.Def.Trust()),
			})
		}
	}
	backoff := st.env.Options.Backoff(st.attempt)
	st.self, st.root = c.Self(), c.ActorSystem().Root
	st.env.Work.Add(1)
	if backoff > 0 {
		st.env.Pool.Go(func() { st.work(backoff) })
	} else {
		st.env.Pool.Go(st.workNow)
	}
}

// deadline is when the invocation times out.
func (st *invState) deadline() time.Time { return st.start.Add(st.env.Options.Timeout()) }

// workNow runs one attempt, without backoff, on a pooled goroutine.
func (st *invState) workNow() { st.work(0) }

func (st *invState) work(backoff time.Duration) {
	defer st.env.Work.Done()
	d := &st.done
	*d = workDone{}
	if backoff > 0 {
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-st.ctx.Done():
			t.Stop()
			d.err = st.ctx.Err()
			st.root.Send(st.self, d)
			return
		}
	}
	d.out, d.err = execute(st.env.Execute, st.ctx, &st.inv)
	st.root.Send(st.self, d)
}

// execute runs one attempt through the Env's Execute, the local agent loop
// when that is nil, turning a panic in user code (a tool, a hook, a model)
// into an error rather than a crashed process.
func execute(run func(context.Context, *agent.Invocation) (agent.Outcome, error), ctx context.Context, inv *agent.Invocation) (out agent.Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = svc.Errorf(svc.KindRuntime, "agent %s panicked: %v", inv.Agent.Def.Name, p)
		}
	}()
	if run == nil {
		return agent.Run(ctx, inv)
	}
	return run(ctx, inv)
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
	err := d.err
	// An attempt that ran on a worker was retried there already.
	if err != nil && !d.out.Remote && st.ctx.Err() == nil && retryable(err) && st.attempt < st.env.Options.RetryMaxAttempts {
		panic(&retry{err: err})
	}
	st.cancel(nil)
	res := svc.AgentResult{
		AgentName: st.run.Agent.Def.Name,
		TaskID:    st.task.ID,
		Metadata: svc.ResultMetadata{
			TraceID: st.task.Trace, TokensUsed: st.tokens, CostUSD: st.cost, Model: st.model,
			Attempts: st.attempt, Backend: st.env.BackendName(),
			ModelsTried: st.tried, CostUnknown: st.unpriced,
		},
	}
	dur := time.Since(st.start)
	res.Metadata.DurationMS = ms(dur)
	if err == nil {
		res.Success = true
		res.Output = d.out.Output
		st.runEvent(svc.RunAgentCompleted, "")
		if !st.env.Silent && !d.out.Remote {
			st.emit(svc.EventAgentCompleted, svc.Payload{
				"duration_ms": res.Metadata.DurationMS, "tokens_used": st.tokens,
				"backend": res.Metadata.Backend, "model": st.model,
			})
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
		if !d.out.Remote {
			st.emit(svc.EventAgentFailed, p)
		}
		st.runEvent(svc.RunAgentFailed, msg)
	}
	// The result goes straight into the run's slot for it; the message that
	// follows hands the slot back to the run actor.
	*st.out = res
	c.Send(c.Parent(), st)
	c.Stop(c.Self())
}

// describe gives the ends of the invocation's context their reasons: its
// own deadline is a TimeoutError, a cancelled run a CancelledError.
func (st *invState) describe(err error) error {
	name := st.run.Agent.Def.Name
	cause := context.Cause(st.ctx)
	if errors.Is(cause, svc.ErrShuttingDown) {
		return &svc.Error{Kind: svc.KindShuttingDown, Reason: "shutting_down", Agent: name, TaskID: st.task.ID, Err: err,
			Message: fmt.Sprintf("agent %s: cancelled: the runtime is shutting down", name)}
	}
	switch kind := svc.KindOf(err); {
	case kind == svc.KindTimeout || errors.Is(err, context.DeadlineExceeded) || errors.Is(cause, context.DeadlineExceeded):
		return &svc.Error{Kind: svc.KindTimeout, Reason: "timeout", Agent: name, TaskID: st.task.ID, Err: err,
			Message: fmt.Sprintf("agent %s: timed out after %v", name, st.env.Options.Timeout())}
	case kind == svc.KindCancelled || errors.Is(err, context.Canceled):
		return &svc.Error{Kind: svc.KindCancelled, Reason: "cancelled", Agent: name, TaskID: st.task.ID, Err: err,
			Message: fmt.Sprintf("agent %s: cancelled", name)}
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
	case svc.KindBudgetExceeded, svc.KindDepthLimit, svc.KindSpawnCycle, svc.KindTrustViolation,
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
	st.env.Emitter.Emit(svc.RuntimeEvent{
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
