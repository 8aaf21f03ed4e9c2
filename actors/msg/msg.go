// Package msg is the runtime's message API: the messages a host's
// protoactor actors send to the runtime's actor (supervisor.Runtime.PID)
// to run agents, gather, run groups, submit, cancel and subscribe to
// events, and the replies they get back.
//
// The conventions are protoactor's: send a request with ctx.Request (or
// RootContext.RequestFuture) so that it carries a sender, and the reply
// comes back to that sender, the way ctx.Respond answers. Every request
// has a Ref, echoed in its reply, so an actor with many requests out can
// tell the replies apart. A request refused or failed is answered with
// an *Error whose Kind is the Go API's error kind for the same failure.
//
// A run started by an actor is tied to it: the runtime watches the
// sender, and when it stops, its runs that are still going are
// cancelled, unless the request said Detached. A future cannot be
// watched: a RunAgent, Gather or RunGroup sent with RequestFuture is
// cancelled when the future ends without its reply (its timeout), unless
// Detached; a Submit sent with a future is tied to nothing. Runs are svc's actors,
// under svc's own supervisors: a host supervisor's decisions apply to the
// host's actors only.
package msg

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/svc-dev/svc"
)

// RunAgent runs one task on an agent. Reply: *AgentResult, or *Error for
// a rejection (unknown agent, bad input, budget, depth) or the run's
// timeout, as svc.Backend.Run returns them.
type RunAgent struct {
	Ref   string
	Agent string
	Task  svc.TaskSpec
	// Detached keeps the run going when the sender stops.
	Detached bool
}

// Gather runs many tasks on one agent, at most MaxConcurrency at once
// (1..svc.MaxGatherConcurrency). Reply: *GatherResult, the results in
// task order, or *Error.
type Gather struct {
	Ref            string
	Agent          string
	Tasks          []svc.TaskSpec
	MaxConcurrency int
	Detached       bool
}

// RunGroup runs a group on one task. Reply: *GroupResult or *Error.
type RunGroup struct {
	Ref      string
	Group    string
	Task     svc.TaskSpec
	Detached bool
}

// Submit records a run and starts it, as svc.RunBackend.Submit does.
// Reply: *Submitted, with the run's id and the PID of an actor that
// lives as long as the run: Watch it to get actor.Terminated when the run
// has ended (completed, failed or cancelled), or send it a Cancel.
type Submit struct {
	Ref      string
	Request  svc.SubmitRequest
	Detached bool
}

// Cancel cancels a run. With RunID, a submitted run (as
// svc.RunBackend.CancelRun: idempotent for a known run, a RegistryError
// for an unknown one); otherwise the run, gather or group run this
// sender started with the Ref given. Sent to a submitted run's actor
// (Submitted.Run), it cancels that run and needs neither. Reply:
// *Cancelled or *Error.
type Cancel struct {
	Ref   string
	RunID string
}

// Subscribe makes events arrive at Target (the sender when nil) until
// Unsubscribe, until Target stops, or until the runtime shuts down.
// With RunID, they are the submitted run's *RunEvent messages, history
// first, then live, ending after its terminal event. Without, they are
// the runtime's *RuntimeEvent messages that Filter matches, live, through
// the bounded queue of an SSE subscriber (the SSE emitter's QueueSize,
// 1024 by default).
//
// Delivery is bounded as an SSE stream's is: at most Window events are
// handed to Target before it acknowledges them (Ack, or the AckEvents
// middleware on Target's props acknowledges each one once Receive has
// handled it). A Target that falls behind stops the delivery, not the
// runtime: its runtime events wait in the bounded queue, and those that
// find it full are dropped and counted (Dropped), as for an SSE client,
// so a slow Target never holds up a run nor fills its own mailbox. A
// Target that never acknowledges gets its first Window events only.
// Target must be an actor, not a future. Reply: *Subscribed or *Error.
// When the subscription ends, Target gets *SubscriptionEnded (and what
// was queued for it, whatever its window).
type Subscribe struct {
	Ref    string
	RunID  string
	Filter svc.EventFilter
	Target *actor.PID
	// Window is how many events Target may have unacknowledged
	// (DefaultWindow when 0; at least 1).
	Window int
}

// DefaultWindow is a subscription's Window when Subscribe gives none.
const DefaultWindow = 256

// Unsubscribe ends a subscription: the events it had queued still
// arrive, then *SubscriptionEnded. Reply: *Unsubscribed or *Error.
type Unsubscribe struct {
	Ref string
	ID  string
}

// AgentResult answers RunAgent.
type AgentResult struct {
	Ref    string
	Result svc.AgentResult
}

// GatherResult answers Gather: the results in task order.
type GatherResult struct {
	Ref     string
	Results []svc.AgentResult
}

// GroupResult answers RunGroup: a group's GroupResult, or a team's
// AgentResult.
type GroupResult struct {
	Ref    string
	Result svc.RunResult
}

// Submitted answers Submit.
type Submitted struct {
	Ref   string
	RunID string
	// Run lives as long as the run; it stops once the run has ended.
	Run *actor.PID
}

// Cancelled answers Cancel.
type Cancelled struct {
	Ref   string
	RunID string
}

// Subscribed answers Subscribe with the subscription's id.
type Subscribed struct {
	Ref string
	ID  string
}

// Unsubscribed answers Unsubscribe.
type Unsubscribed struct {
	Ref string
	ID  string
}

// RuntimeEvent is one runtime event of a subscription. Dropped is how many
// matching events the subscription has dropped so far.
type RuntimeEvent struct {
	Subscription string
	Event        svc.RuntimeEvent
	Dropped      uint64
	ack          acker
}

// Ack acknowledges the event, opening the subscription's window for one
// more (see Subscribe). Acknowledging an event again does nothing.
func (e *RuntimeEvent) Ack() { e.ack.ack() }

// RunEvent is one event of a submitted run's subscription.
type RunEvent struct {
	Subscription string
	Event        svc.RunEvent
	ack          acker
}

// Ack acknowledges the event, opening the subscription's window for one
// more (see Subscribe). Acknowledging an event again does nothing.
func (e *RunEvent) Ack() { e.ack.ack() }

// NewRuntimeEvent is a subscription's runtime event, counted in f's
// window until acknowledged. For the runtime's use.
func NewRuntimeEvent(f *Flow, subscription string, ev svc.RuntimeEvent, dropped uint64) *RuntimeEvent {
	return &RuntimeEvent{Subscription: subscription, Event: ev, Dropped: dropped, ack: acker{flow: f}}
}

// NewRunEvent is a run subscription's event, counted in f's window until
// acknowledged. For the runtime's use.
func NewRunEvent(f *Flow, subscription string, ev svc.RunEvent) *RunEvent {
	return &RunEvent{Subscription: subscription, Event: ev, ack: acker{flow: f}}
}

// AckEvents is receiver middleware that acknowledges each *RuntimeEvent
// and *RunEvent once the actor's Receive has handled it: give it to a
// subscriber's props, actor.WithReceiverMiddleware(msg.AckEvents), and
// the subscription's window moves on as the actor keeps up.
func AckEvents(next actor.ReceiverFunc) actor.ReceiverFunc {
	return func(c actor.ReceiverContext, env *actor.MessageEnvelope) {
		next(c, env)
		switch m := env.Message.(type) {
		case *RuntimeEvent:
			m.Ack()
		case *RunEvent:
			m.Ack()
		}
	}
}

// Flow is a subscription's window: the events handed to its target and
// not yet acknowledged. The runtime takes a place (Acquire) before each
// event it sends and the event's Ack gives it back.
type Flow struct {
	size int64
	out  atomic.Int64
	wake chan struct{} // a place came free
}

// NewFlow returns a window of size events (DefaultWindow when size <= 0).
func NewFlow(size int) *Flow {
	if size <= 0 {
		size = DefaultWindow
	}
	return &Flow{size: int64(size), wake: make(chan struct{}, 1)}
}

// Acquire waits for a place in the window; false when done ended first.
func (f *Flow) Acquire(done <-chan struct{}) bool {
	for {
		if n := f.out.Load(); n < f.size {
			if f.out.CompareAndSwap(n, n+1) {
				return true
			}
			continue
		}
		select {
		case <-f.wake:
		case <-done:
			return false
		}
	}
}

// Take counts an event sent without waiting for a place (what was queued
// when the subscription ended).
func (f *Flow) Take() { f.out.Add(1) }

// Outstanding is the number of events sent and not yet acknowledged.
func (f *Flow) Outstanding() int { return int(f.out.Load()) }

func (f *Flow) release() {
	f.out.Add(-1)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// acker gives an event's place back to its flow, once.
type acker struct {
	flow  *Flow
	acked atomic.Bool
}

func (a *acker) ack() {
	if a.flow != nil && a.acked.CompareAndSwap(false, true) {
		a.flow.release()
	}
}

// SubscriptionEnded is the last message of a subscription, with the
// number of events it dropped in all.
type SubscriptionEnded struct {
	ID      string
	Dropped uint64
}

// Error answers a request that was refused or failed. Kind is the error
// kind the Go API gives for the same failure; Err is that error, so
// errors.Is(reply, svc.ErrBudgetExceeded) and errors.As work on it.
type Error struct {
	Ref  string
	Kind svc.Kind
	Err  error
}

// NewError is the reply to the request ref that failed with err.
func NewError(ref string, err error) *Error {
	return &Error{Ref: ref, Kind: svc.KindOf(err), Err: err}
}

func (e *Error) Error() string { return e.Err.Error() }

// Unwrap returns the Go API's error.
func (e *Error) Unwrap() error { return e.Err }
