package svc

import "context"

// Scope is what a run hands down, through its context.Context, to the runs
// started inside it, as far as every package shares it: who is calling
// (the depth, trace and span of the invocation whose tool is running), the
// request id host middleware set, the progress callback and the caller's
// conversation. It is one value under one context key: each entry point
// reads it once and a new one is written only where something changes (a
// tool call of an invocation, a group's span), so a run that starts no
// other run pays nothing for it. The runtime keeps its own per-request
// state (token cap, progress counter, run event sink, spawn path, team
// rounds) beside it, typed, under a context key of package supervisor.
//
// The With*/ *From helpers below are the public way to read and set its
// parts; they stay so that embedders' middleware and tools keep working
// without knowing the struct.
type Scope struct {
	// RequestID is the request id host middleware set (WithRequestID); a
	// run without its own TaskSpec.RequestID takes it as its trace id.
	RequestID string
	// Depth is the spawn depth of the invocation running in the context,
	// -1 outside one: a run started there runs at Depth+1.
	Depth int
	// ParentTrace and ParentSpan are the trace and span id of that
	// invocation: runs started in the context carry them as their
	// parent_trace_id and parent_span_id.
	ParentTrace string
	ParentSpan  string
	// Progress receives the progress of group runs and gathers started in
	// the context (WithProgress).
	Progress ProgressFunc
	// Deltas receives the streamed answers' fragments of the runs started
	// in the context (WithDeltas); nil when nobody listens.
	Deltas DeltaSink
	// Conversation, inside a tool call, returns the calling invocation's
	// conversation so far (package agent's Conversation reads it).
	Conversation func() []Message
	// RunID and EventsTo are set by a worker for the task it runs: the run
	// the task belongs to (what a fleet's cancel broadcast names) and the
	// subject its publisher wants the events on ("" for none). A runtime
	// that dispatches the runs nested in the task to the fleet passes them
	// on, so a cancel of the run and the events of the whole tree reach
	// every worker and the publisher across hops.
	RunID    string
	EventsTo string
	// Priority is the priority of the model calls of the runs started in
	// the context while they wait for a rate limit's turn: "high",
	// "normal" (or "") or "low".
	Priority string
}

type scopeKey struct{}

// ScopeFrom returns the scope of ctx: a copy, so changing it changes
// nothing until it is put back with WithScope. Outside any scope it is the
// zero Scope with Depth -1.
func ScopeFrom(ctx context.Context) Scope {
	if s, ok := ctx.Value(scopeKey{}).(*Scope); ok {
		return *s
	}
	return Scope{Depth: -1}
}

// WithScope returns ctx carrying s.
func WithScope(ctx context.Context, s Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, &s)
}

// WithRequestID returns ctx carrying a request id, which a run without its
// own TaskSpec.RequestID takes as its trace id. Host middleware that sets
// X-Request-Id has it promoted this way.
func WithRequestID(ctx context.Context, id string) context.Context {
	s := ScopeFrom(ctx)
	s.RequestID = id
	return WithScope(ctx, s)
}

// RequestIDFrom returns the request id in ctx, or "".
func RequestIDFrom(ctx context.Context) string {
	if s, ok := ctx.Value(scopeKey{}).(*Scope); ok {
		return s.RequestID
	}
	return ""
}

// WithDepth returns ctx carrying the spawn depth of the invocation running
// in it. A run started with such a ctx (by a tool, say) runs one deeper.
func WithDepth(ctx context.Context, depth int) context.Context {
	s := ScopeFrom(ctx)
	s.Depth = depth
	return WithScope(ctx, s)
}

// DepthFrom returns the depth of the invocation running in ctx, or -1 when
// ctx is not inside one (a new run there is top level, depth 0).
func DepthFrom(ctx context.Context) int {
	if s, ok := ctx.Value(scopeKey{}).(*Scope); ok {
		return s.Depth
	}
	return -1
}

// WithParentTrace returns ctx carrying the trace id of the invocation
// running in it, so that runs started inside it name it as their parent.
func WithParentTrace(ctx context.Context, trace string) context.Context {
	s := ScopeFrom(ctx)
	s.ParentTrace = trace
	return WithScope(ctx, s)
}

// ParentTraceFrom returns the parent trace id in ctx, or "".
func ParentTraceFrom(ctx context.Context) string {
	if s, ok := ctx.Value(scopeKey{}).(*Scope); ok {
		return s.ParentTrace
	}
	return ""
}

// WithProgress returns ctx carrying fn: group runs and gathers started with
// it report their progress to fn.
func WithProgress(ctx context.Context, fn ProgressFunc) context.Context {
	s := ScopeFrom(ctx)
	s.Progress = fn
	return WithScope(ctx, s)
}

// ProgressFrom returns the ProgressFunc in ctx, or nil.
func ProgressFrom(ctx context.Context) ProgressFunc {
	if s, ok := ctx.Value(scopeKey{}).(*Scope); ok {
		return s.Progress
	}
	return nil
}
