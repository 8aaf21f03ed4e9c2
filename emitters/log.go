// Package emitters holds the runtime's event emitters: the log emitter that
// is always on, Multi, which fans one event out to several emitters, Async,
// a bounded queue in front of an emitter that may block, and the
// OpenTelemetry metrics emitter.
package emitters

import (
	"slices"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/svc-dev/svc"
)

// unknownEventMessage is the log message of an event without a type, so
// that such an event still leaves a searchable line instead of an empty one.
const unknownEventMessage = "runtime_event"

// Field names the log emitter writes for every event. A payload key that
// collides with one of them is written as "payload.<key>" so that it can
// neither hide nor duplicate the event's own fields.
var reservedFields = map[string]bool{
	"agent": true, "task_id": true, "trace_id": true, "parent_trace_id": true,
	"span_id": true, "parent_span_id": true,
}

// NewLog returns the LogEventEmitter: it logs each event with the event type
// as the message ("agent_completed"), the fields agent, task_id, trace_id,
// parent_trace_id, span_id and parent_span_id (each only when set) and the
// payload keys in sorted order. The failure types
// (svc.EventType.IsFailure) log at error level, agent_delta at debug
// level, all others at info level. Emit writes synchronously through l's core, so it costs what
// the core's write costs and no more; it never panics. A nil l logs nothing.
func NewLog(l *zap.Logger) svc.Emitter {
	if l == nil {
		l = zap.NewNop()
	}
	// A caller or stack trace would only ever point into this file, and a
	// production logger would otherwise capture a stack for every
	// agent_failed event: pure cost, no information.
	return &logEmitter{l: l.WithOptions(zap.WithCaller(false), zap.AddStacktrace(never))}
}

var never = zap.LevelEnablerFunc(func(zapcore.Level) bool { return false })

type logEmitter struct {
	l *zap.Logger
}

// Emit logs ev. A panic from the core or from a payload value's marshaller
// is recovered, counted and logged at zap.L() (recoverEmit): an emitter
// must never take the runtime down with it.
func (e *logEmitter) Emit(ev svc.RuntimeEvent) {
	defer recoverEmit("log")

	level := zapcore.InfoLevel
	switch {
	case ev.EventType.IsFailure():
		level = zapcore.ErrorLevel
	case ev.EventType == svc.EventAgentDelta:
		// A streamed answer's fragments: one line each would drown the
		// log, and the answer is in agent_completed's result anyway.
		level = zapcore.DebugLevel
	}
	msg := string(ev.EventType)
	if msg == "" {
		msg = unknownEventMessage
	}
	// Check first so that a disabled level costs no field allocation.
	ce := e.l.Check(level, msg)
	if ce == nil {
		return
	}
	ce.Write(fields(ev)...)
}

func fields(ev svc.RuntimeEvent) []zap.Field {
	fs := make([]zap.Field, 0, 6+len(ev.Payload))
	fs = append(fs,
		zap.String("agent", ev.AgentName),
		zap.String("task_id", ev.TaskID),
		zap.String("trace_id", ev.TraceID),
	)
	if ev.ParentTraceID != "" {
		fs = append(fs, zap.String("parent_trace_id", ev.ParentTraceID))
	}
	if ev.SpanID != "" {
		fs = append(fs, zap.String("span_id", ev.SpanID))
	}
	if ev.ParentSpanID != "" {
		fs = append(fs, zap.String("parent_span_id", ev.ParentSpanID))
	}
	// Events carry a few payload keys: sorted in an array on the stack.
	var kb [12]string
	keys := kb[:0]
	for k := range ev.Payload {
		keys = append(keys, k)
	}
	// Sorted so that two lines for the same event type read the same way.
	slices.Sort(keys)
	for _, k := range keys {
		name := k
		if reservedFields[k] {
			name = "payload." + k
		}
		fs = append(fs, zap.Any(name, ev.Payload[k]))
	}
	return fs
}
