package svc

import "context"

type ctxKey int

const (
	requestIDKey ctxKey = iota
	depthKey
	parentTraceKey
)

// WithRequestID returns ctx carrying a request id, which a run without its
// own TaskSpec.RequestID takes as its trace id. Host middleware that sets
// X-Request-Id has it promoted this way.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey, id)
}

// RequestIDFrom returns the request id in ctx, or "".
func RequestIDFrom(ctx context.Context) string {
	s, _ := ctx.Value(requestIDKey).(string)
	return s
}

// WithDepth returns ctx carrying the spawn depth of the invocation running
// in it. A run started with such a ctx (by a tool, say) runs one deeper.
func WithDepth(ctx context.Context, depth int) context.Context {
	return context.WithValue(ctx, depthKey, depth)
}

// DepthFrom returns the depth of the invocation running in ctx, or -1 when
// ctx is not inside one (a new run there is top level, depth 0).
func DepthFrom(ctx context.Context) int {
	d, ok := ctx.Value(depthKey).(int)
	if !ok {
		return -1
	}
	return d
}

// WithParentTrace returns ctx carrying the trace id of the invocation
// running in it, so that runs started inside it name it as their parent.
func WithParentTrace(ctx context.Context, trace string) context.Context {
	return context.WithValue(ctx, parentTraceKey, trace)
}

// ParentTraceFrom returns the parent trace id in ctx, or "".
func ParentTraceFrom(ctx context.Context) string {
	s, _ := ctx.Value(parentTraceKey).(string)
	return s
}
