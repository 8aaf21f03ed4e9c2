package svc

import "context"

// Token streaming: a model that streams its answer hands each text
// fragment to the runtime as it arrives (ModelRequest.OnDelta); the
// runtime coalesces the fragments of one invocation (Options.DeltaInterval
// and DeltaBytes) and hands each coalesced piece to whoever listens: the
// emitters as an agent_delta RuntimeEvent, a submitted run's followers as a
// delta RunEvent, and a caller's DeltaFunc (WithDeltas). Deltas are live
// only: the event stores do not keep them, they are not usage (the call's
// tokens come from its final usage report), and a stream that resumes from
// Last-Event-ID does not replay them.

// EventAgentDelta is a coalesced fragment of an agent's streamed answer:
// payload "text" (the fragment) and "index" (0, 1, 2, ... within the
// invocation, whose span the event's span_id names). It is beyond the
// spec's sixteen types, so it is not in EventTypes: a subscription sees it
// only when it asks (EventFilter.Deltas), and the event stores do not
// store it.
const EventAgentDelta EventType = "agent_delta"

// RunDelta is the RunEvent of a coalesced fragment of a submitted run's
// streamed answer, with the fragment in Text. It has Seq 0 and no SSE id:
// it is not stored, and a stream resumed with Last-Event-ID does not
// replay it.
const RunDelta RunEventType = "delta"

// Delta is a coalesced fragment of an invocation's streamed answer.
type Delta struct {
	// Agent, TaskID, TraceID and SpanID name the invocation;
	// ParentTraceID and ParentSpanID place it in its run tree, as on its
	// events (a worker relays deltas to its publisher as agent_delta
	// events).
	Agent         string
	TaskID        string
	TraceID       string
	SpanID        string
	ParentTraceID string
	ParentSpanID  string
	// Index numbers the invocation's deltas from 0, across its model
	// calls: a gap means a listener missed one.
	Index int
	// Text is the fragment.
	Text string
}

// DeltaSink receives the deltas of the runs started in a context
// (WithDeltas). Listening says whether someone listens now: an agent whose
// model_settings do not say whether to stream streams when it does, so
// that nobody pays for a stream nobody reads. Both are called from the
// runs' goroutines, Delta one call at a time per invocation, and must
// return quickly.
type DeltaSink interface {
	Delta(Delta)
	Listening() bool
}

// DeltaFunc adapts a function to a DeltaSink that always listens.
type DeltaFunc func(Delta)

// Delta calls f.
func (f DeltaFunc) Delta(d Delta) { f(d) }

// Listening is true: a function given is a listener.
func (f DeltaFunc) Listening() bool { return true }

// WithDeltas returns ctx whose runs hand their deltas to sink, and stream
// from their models when it listens (an agent's model_settings.stream
// decides for itself when it is set).
func WithDeltas(ctx context.Context, sink DeltaSink) context.Context {
	s := ScopeFrom(ctx)
	s.Deltas = sink
	return WithScope(ctx, s)
}
