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

	// ctx, cancel, start and deadline are set by the run actor, which
	// enforces the deadline; finished is the run actor's too.
	ctx      context.Context
	cancel   context.CancelCauseFunc
	start    time.Time
	deadline time.Time
	finished bool
	attempt  int
	tokens   int64
	cost     float64
	model    string
	tried    []string // models called by the last attempt, in order
	unpriced bool     // some model call had no price
	self     *actor.PID
	root     *actor.RootContext
	sink     RunSink // the submitted run's event stream, if any

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
		st.sink = sinkFrom(st.ctx)
		st.runEvent(svc.RunAgentStarted, "")
		if !st.env.Silent {
			st.emit(svc.EventAgentSpawned, svc.Payload{
				"backend": svc.BackendLocal, "trust_level": string(st.run.Agent.Def.Trust()),
			})
		}
	}
	backoff := st.env.Options.Backoff(st.attempt)
	if st.attempt == 1 {
		st.inv = agent.Invocation{
			Agent: st.run.Agent, Input: st.task.Input, TaskID: st.task.ID, TraceID: st.task.Trace,
			ParentTraceID: st.run.ParentTrace, Depth: st.run.Depth, Emitter: st.env.Emitter,
		}
		if st.run.Budget != nil {
			st.inv.Budget = st.run.Budget.For(st.run.Agent.Def.Name, st.task.ID, st.task.Trace, st.run.ParentTrace)
		}
	}
	st.self, st.root = c.Self(), c.ActorSystem().Root
	st.env.Work.Add(1)
	if backoff > 0 {
		st.env.Pool.Go(func() { st.work(backoff) })
	} else {
		st.env.Pool.Go(st.workNow)
	}
}

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
	d.out, d.err = runLoop(st.ctx, &st.inv)
	st.root.Send(st.self, d)
}

// runLoop runs the agent loop, turning a panic in user code (a tool, a hook,
// a model) into an error rather than a crashed process.
func runLoop(ctx context.Context, inv *agent.Invocation) (out agent.Outcome, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = svc.Errorf(svc.KindRuntime, "agent %s panicked: %v", inv.Agent.Def.Name, p)
		}
	}()
	return agent.Run(ctx, inv)
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
	if err != nil && st.ctx.Err() == nil && retryable(err) && st.attempt < st.env.Options.RetryMaxAttempts {
		panic(&retry{err: err})
	}
	st.cancel(nil)
	res := svc.AgentResult{
		AgentName: st.run.Agent.Def.Name,
		TaskID:    st.task.ID,
		Metadata: svc.ResultMetadata{
			TraceID: st.task.Trace, TokensUsed: st.tokens, CostUSD: st.cost, Model: st.model,
			Attempts: st.attempt, Backend: svc.BackendLocal,
			ModelsTried: st.tried, CostUnknown: st.unpriced,
		},
	}
	dur := time.Since(st.start)
	res.Metadata.DurationMS = ms(dur)
	if err == nil {
		res.Success = true
		res.Output = d.out.Output
		st.runEvent(svc.RunAgentCompleted, "")
		if !st.env.Silent {
			st.emit(svc.EventAgentCompleted, svc.Payload{
				"duration_ms": res.Metadata.DurationMS, "tokens_used": st.tokens,
				"backend": svc.BackendLocal, "model": st.model,
			})
		}
	} else {
		err = st.describe(err)
		res.Error = svc.ErrorInfoOf(err)
		p := svc.Payload{"duration_ms": res.Metadata.DurationMS, "error": err.Error(), "backend": svc.BackendLocal}
		if res.Error.Reason != "" {
			p["reason"] = res.Error.Reason
		}
		st.emit(svc.EventAgentFailed, p)
		st.runEvent(svc.RunAgentFailed, err.Error())
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

func (st *invState) emit(t svc.EventType, p svc.Payload) {
	st.env.Emitter.Emit(svc.RuntimeEvent{
		EventType: t, Timestamp: time.Now().UTC(), AgentName: st.run.Agent.Def.Name, TaskID: st.task.ID,
		TraceID: st.task.Trace, ParentTraceID: st.run.ParentTrace, Payload: p,
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// RunSink receives the run events (agent_started, agent_completed,
// agent_failed) of the invocations of a submitted run. It is called from
// actors: it must not block.
type RunSink func(svc.RunEvent)

type sinkKey struct{}

// WithRunSink returns ctx carrying sink: every invocation run under ctx,
// nested ones included, reports its run events to it.
func WithRunSink(ctx context.Context, sink RunSink) context.Context {
	return context.WithValue(ctx, sinkKey{}, sink)
}

func sinkFrom(ctx context.Context) RunSink {
	s, _ := ctx.Value(sinkKey{}).(RunSink)
	return s
}

func (st *invState) runEvent(t svc.RunEventType, errText string) {
	if st.sink != nil {
		st.sink(svc.RunEvent{Type: t, Agent: st.run.Agent.Def.Name, TaskID: st.task.ID, Error: errText, Timestamp: time.Now().UTC()})
	}
}
