package svc

import (
	"encoding/json"
	"fmt"
	"time"
)

// EventType is the type of a RuntimeEvent.
type EventType string

// The sixteen event types of the spec, rate_limited, run_resumed and
// run_waiting.
const (
	EventAgentSpawned       EventType = "agent_spawned"
	EventAgentDispatched    EventType = "agent_dispatched"
	EventAgentCompleted     EventType = "agent_completed"
	EventAgentFailed        EventType = "agent_failed"
	EventToolCallStarted    EventType = "tool_call_started"
	EventToolCallCompleted  EventType = "tool_call_completed"
	EventToolCallFailed     EventType = "tool_call_failed"
	EventBudgetExceeded     EventType = "budget_exceeded"
	EventDepthLimitExceeded EventType = "depth_limit_exceeded"
	EventBatchStarted       EventType = "batch_started"
	EventBatchCompleted     EventType = "batch_completed"
	EventGroupStarted       EventType = "group_started"
	EventGroupCompleted     EventType = "group_completed"
	EventWorkerStarted      EventType = "worker_started"
	EventWorkerStopped      EventType = "worker_stopped"
	EventWorkerHeartbeat    EventType = "worker_heartbeat"
	// EventRateLimited is a model call that waited longer than a second
	// for a rate limit's turn (package ratelimit).
	EventRateLimited EventType = "rate_limited"
	// EventRunResumed is a submitted run a new process took over after the
	// one running it died: it replays the steps recorded so far and goes
	// on from there.
	EventRunResumed EventType = "run_resumed"
	// EventRunWaiting is a submitted run that paused for a person's
	// approval or answer (issue 31).
	EventRunWaiting EventType = "run_waiting"
)

// EventTypes lists all the event types (but agent_delta, which is never
// stored).
var EventTypes = []EventType{
	EventAgentSpawned, EventAgentDispatched, EventAgentCompleted, EventAgentFailed,
	EventToolCallStarted, EventToolCallCompleted, EventToolCallFailed,
	EventBudgetExceeded, EventDepthLimitExceeded,
	EventBatchStarted, EventBatchCompleted, EventGroupStarted, EventGroupCompleted,
	EventWorkerStarted, EventWorkerStopped, EventWorkerHeartbeat,
	EventRateLimited, EventRunResumed, EventRunWaiting,
}

// PayloadKeys is the payload contract of each event type: exactly these keys,
// plus those of OptionalPayloadKeys when present.
//
// agent_completed's "cost_usd" is the invocation's cost in US dollars, the
// same figure as its AgentResult's metadata.cost_usd (both come from the
// invocation's sum over its model calls: the provider's reported cost, else
// the price table's; an unpriced call counts as 0, as in the result). It is
// required: every producer of this version knows it, a worker included
// (the worker's own invocation emits the event). Events written before it
// existed (an older event store file, an older worker's relay) lack it;
// every reader (the event stores' usage rollups, the dashboard) counts
// those as cost 0.
var PayloadKeys = map[EventType][]string{
	EventAgentSpawned:       {"backend", "trust_level"},
	EventAgentDispatched:    {"backend", "broker", "trust_level"},
	EventAgentCompleted:     {"duration_ms", "tokens_used", "cost_usd", "backend", "model"},
	EventAgentFailed:        {"duration_ms", "error", "backend"},
	EventAgentDelta:         {"text", "index"},
	EventToolCallStarted:    {"tool_name", "trust_level"},
	EventToolCallCompleted:  {"tool_name", "duration_ms", "tokens_used"},
	EventToolCallFailed:     {"tool_name", "error", "duration_ms"},
	EventBudgetExceeded:     {"limit", "used", "scope"},
	EventDepthLimitExceeded: {"limit", "depth"},
	EventBatchStarted:       {"task_count", "max_concurrency"},
	EventBatchCompleted:     {"task_count", "success_count", "failure_count"},
	EventGroupStarted:       {"group_name", "node_count"},
	EventGroupCompleted:     {"group_name", "duration_ms"},
	EventWorkerStarted:      {"runtime_id", "agents", "broker_scheme", "concurrency", "prefetch", "consumer_id", "heartbeat_seconds"},
	EventWorkerStopped:      {"runtime_id", "agents", "broker_scheme"},
	EventWorkerHeartbeat:    {"runtime_id", "agent_subscriptions", "in_flight", "concurrency_cap", "broker_scheme"},
	// rate_limited: the limit's name ("rate_limit": "limit" is a number
	// of tokens on budget events), how long the call waited, and why:
	// "paused" (a 429 paused the limit), "paced" (the per-minute pace),
	// "concurrency" (calls at once) or "queued" (behind other calls).
	EventRateLimited: {"rate_limit", "wait_ms", "reason"},
	// run_resumed: the run, how many recorded steps it replays, the node
	// that resumed it (the run store's owner id; "" for a file store) and
	// how many times it was resumed.
	EventRunResumed: {"run_id", "steps_replayed", "node", "resumed"},
	// run_waiting: the run, the request's id and kind ("approval" or
	// "question") and the tool it is about.
	EventRunWaiting: {"run_id", "request_id", "wait_kind", "tool_name"},
}

// OptionalPayloadKeys are the keys an event type may add to PayloadKeys.
//
// On agent_failed and tool_call_failed, "reason" is the failure's error
// kind, a Kind name such as "ModelError" or "TrustViolationError": the
// spec's "typed reason". It is what metrics and rollups classify failures
// by (FailureKind); nothing reads the kind out of the "error" text. On
// agent_failed, "model" is the resolved provider:name of the model that
// answered or was tried last, when one was, so failed runs carry the
// provider and model too.
//
// On agent_completed, "cached_tokens" is the result's metadata.cached_tokens,
// when the calls read some input from a provider's prompt cache.
var OptionalPayloadKeys = map[EventType][]string{
	EventAgentCompleted: {"cached_tokens"},
	// budget_exceeded has "overshoot" when a post-charge took the budget
	// past its limit: the tokens used past it (used − limit). A pre-check
	// that refused a call, or a run refused up front, has none. With scope
	// "runtime" the call that overshot kept its result (the budget is
	// spent and refuses what comes next); with scope "run" its run failed.
	EventBudgetExceeded: {"overshoot"},
	EventAgentFailed:    {"reason", "model"},
	EventToolCallFailed: {"reason"},
	// A streamed gather's batch_started has "streamed": true and
	// task_count -1, since its tasks are not known yet; its
	// batch_completed counts them.
	EventBatchStarted: {"streamed"},
	// The task messages a worker refused unrun (unsigned, badly signed,
	// tampered or undecodable), and the tasks of runs cancelled before
	// they were taken, answered cancelled unrun, and the panics of
	// handlers its broker client recovered (svc.PanicCounter): each once
	// it is not 0.
	EventWorkerHeartbeat: {"rejected", "skipped_cancelled", "handler_panics"},
	// group_completed says whether the group run as a whole succeeded
	// (its result's success): a group whose fan-out lost a branch may
	// still have, and its run then completed, not failed.
	EventGroupCompleted: {"success"},
}

// IsFailure reports whether events of this type log at error level.
func (t EventType) IsFailure() bool {
	switch t {
	case EventAgentFailed, EventToolCallFailed, EventBudgetExceeded, EventDepthLimitExceeded:
		return true
	}
	return false
}

// Payload is the per-type data of a RuntimeEvent.
type Payload map[string]any

// RuntimeEvent is one thing that happened in the runtime. Treat it as
// immutable once emitted: emitters may hold it and share it.
type RuntimeEvent struct {
	EventType EventType `json:"event_type"`
	Timestamp time.Time `json:"timestamp"`
	// AgentName is the agent; for worker lifecycle events, the runtime_id.
	AgentName string `json:"agent_name"`
	// TaskID is "" for run-level events and written as null.
	TaskID string `json:"task_id"`
	// TraceID is the request id of the run.
	TraceID string `json:"trace_id"`
	// ParentTraceID is the trace of the run that spawned this one, "" (null)
	// for top-level runs.
	ParentTraceID string `json:"parent_trace_id"`
	// SpanID names the invocation (or group or batch run) the event belongs
	// to; ParentSpanID the one that started it. They are envelope fields
	// beside the spec's, written only when set, and what the event store
	// builds a run's tree from.
	SpanID       string  `json:"span_id,omitempty"`
	ParentSpanID string  `json:"parent_span_id,omitempty"`
	Payload      Payload `json:"payload"`
}

type eventJSON struct {
	EventType     EventType `json:"event_type"`
	Timestamp     time.Time `json:"timestamp"`
	AgentName     string    `json:"agent_name"`
	TaskID        *string   `json:"task_id"`
	TraceID       string    `json:"trace_id"`
	ParentTraceID *string   `json:"parent_trace_id"`
	SpanID        string    `json:"span_id,omitempty"`
	ParentSpanID  string    `json:"parent_span_id,omitempty"`
	Payload       Payload   `json:"payload"`
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MarshalJSON writes empty task_id and parent_trace_id as null and a nil
// payload as {}.
func (e RuntimeEvent) MarshalJSON() ([]byte, error) {
	p := e.Payload
	if p == nil {
		p = Payload{}
	}
	return json.Marshal(eventJSON{
		EventType: e.EventType, Timestamp: e.Timestamp.UTC(), AgentName: e.AgentName,
		TaskID: nullable(e.TaskID), TraceID: e.TraceID, ParentTraceID: nullable(e.ParentTraceID),
		SpanID: e.SpanID, ParentSpanID: e.ParentSpanID, Payload: p,
	})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (e *RuntimeEvent) UnmarshalJSON(b []byte) error {
	var j eventJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	// Events are written in UTC; a time whose UTC form leaves years 0..9999
	// could be read but never written again.
	if y := j.Timestamp.UTC().Year(); y < 0 || y > 9999 {
		return fmt.Errorf("timestamp %s: out of range", j.Timestamp.Format(time.RFC3339))
	}
	*e = RuntimeEvent{EventType: j.EventType, Timestamp: j.Timestamp, AgentName: j.AgentName,
		TraceID: j.TraceID, SpanID: j.SpanID, ParentSpanID: j.ParentSpanID, Payload: j.Payload}
	if j.TaskID != nil {
		e.TaskID = *j.TaskID
	}
	if j.ParentTraceID != nil {
		e.ParentTraceID = *j.ParentTraceID
	}
	return nil
}

// Emitter receives runtime events. Emit must return quickly, never block
// the caller on a slow consumer, never panic and never fail: an emitter
// that cannot deliver drops the event (and may count the drop).
type Emitter interface {
	Emit(ev RuntimeEvent)
}

// EmitterFunc adapts a function to Emitter.
type EmitterFunc func(ev RuntimeEvent)

// Emit calls f.
func (f EmitterFunc) Emit(ev RuntimeEvent) { f(ev) }

// NopEmitter drops every event.
type NopEmitter struct{}

// Emit does nothing.
func (NopEmitter) Emit(RuntimeEvent) {}

// Backends reported in events and result metadata.
const (
	BackendLocal = "local"
)

// legacyReasons maps the "reason" values agent_failed carried before it
// carried the error kind, so events stored by earlier versions still
// classify.
var legacyReasons = map[string]Kind{
	"timeout":         KindTimeout,
	"cancelled":       KindCancelled,
	"shutting_down":   KindShuttingDown,
	"budget_exceeded": KindBudgetExceeded,
	"depth_limit":     KindDepthLimit,
	"model_error":     KindModel,
	"invalid_output":  KindOutputValidation,
	"spawn_cycle":     KindSpawnCycle,
	"tool_source":     KindToolExecution,
	"trust":           KindTrustViolation,
}

// FailureKind names the error kind of a failure event (agent_failed,
// tool_call_failed): its "reason", which the runtime sets to the kind's
// name, else fallback. A reason an earlier version wrote ("timeout",
// "model_error", ...) maps to its kind. The "error" text is never parsed:
// only kind names come out, so metric labels and rollup groups stay few
// whatever the texts say. The OTel emitter and the event store both use
// it, so a dashboard and the metrics agree.
func FailureKind(p Payload, fallback Kind) Kind {
	r, _ := p["reason"].(string)
	if k, ok := knownKind(r); ok {
		return k
	}
	if k, ok := legacyReasons[r]; ok {
		return k
	}
	return fallback
}

func knownKind(s string) (Kind, bool) {
	if s == "" {
		return "", false
	}
	for _, k := range Kinds {
		if string(k) == s {
			return k, true
		}
	}
	return "", false
}
