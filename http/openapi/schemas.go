package openapi

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	svc "github.com/svc-dev/svc"
)

// component is one named schema of the document: generated from a Go type
// of the root package, or written here when the type marshals itself in a
// shape its fields do not tell.
type component struct {
	name string
	typ  reflect.Type       // generated from this type, unless schema is set
	hand *jsonschema.Schema // written by hand
}

// Wire shapes the server decodes but the root package has no type for.
type (
	runEnvelope struct {
		Task      svc.TaskSpec `json:"task"`
		RequestID string       `json:"request_id,omitempty"`
	}
	submitBody struct {
		Target    string       `json:"target"`
		Task      svc.TaskSpec `json:"task"`
		Kind      string       `json:"kind,omitempty"`
		RequestID string       `json:"request_id,omitempty"`
		// CallbackURL gets one signed POST when the run ends (docs/api.md, Webhooks).
		CallbackURL string `json:"callback_url,omitempty"`
	}
	submitReply struct {
		RunID string `json:"run_id"`
	}
	// resumeBody is POST /runs/{id}/resume's: approve for an approval,
	// answer (any JSON value) for a question.
	resumeBody struct {
		RequestID string          `json:"request_id"`
		Approve   *bool           `json:"approve,omitempty"`
		Reason    string          `json:"reason,omitempty"`
		Answer    json.RawMessage `json:"answer,omitempty"`
	}
	health struct {
		Status string `json:"status"`
	}
)

func ref(name string) *jsonschema.Schema {
	return &jsonschema.Schema{Ref: "#/components/schemas/" + name}
}

func str() *jsonschema.Schema     { return &jsonschema.Schema{Type: "string"} }
func num() *jsonschema.Schema     { return &jsonschema.Schema{Type: "number"} }
func intg() *jsonschema.Schema    { return &jsonschema.Schema{Type: "integer"} }
func boolean() *jsonschema.Schema { return &jsonschema.Schema{Type: "boolean"} }
func nullableStr() *jsonschema.Schema {
	return &jsonschema.Schema{Types: []string{"null", "string"}}
}
func strArray() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "array", Items: str()}
}
func object(required []string, props map[string]*jsonschema.Schema) *jsonschema.Schema {
	return &jsonschema.Schema{Type: "object", Required: required, Properties: props,
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}}}
}

// payloadTypes is the JSON type of every payload key of every event type
// (svc.PayloadKeys, svc.OptionalPayloadKeys); a key missing here fails the
// package's tests.
var payloadTypes = map[string]func() *jsonschema.Schema{
	"backend": str, "trust_level": str, "broker": str, "model": str, "error": str,
	"reason": str, "tool_name": str, "scope": str, "group_name": str,
	"runtime_id": str, "broker_scheme": str, "consumer_id": str, "rate_limit": str, "run_id": str, "node": str, "request_id": str, "wait_kind": str,
	"duration_ms": num, "heartbeat_seconds": num, "cost_usd": num,
	"tokens_used": intg, "limit": intg, "used": intg, "overshoot": intg, "depth": intg,
	"task_count": intg, "max_concurrency": intg, "success_count": intg,
	"failure_count": intg, "node_count": intg, "concurrency": intg,
	"prefetch": intg, "in_flight": intg, "concurrency_cap": intg, "rejected": intg, "skipped_cancelled": intg, "handler_panics": intg, "cached_tokens": intg, "wait_ms": intg, "steps_replayed": intg, "resumed": intg,
	"agents": strArray, "agent_subscriptions": strArray,
	"streamed": boolean, "success": boolean, "batches": boolean,
}

// payloadSchema is the payload of one event type: exactly its keys, the
// optional ones allowed.
func payloadSchema(t svc.EventType) (*jsonschema.Schema, error) {
	props := map[string]*jsonschema.Schema{}
	keys := append(slices.Clone(svc.PayloadKeys[t]), svc.OptionalPayloadKeys[t]...)
	for _, k := range keys {
		f, ok := payloadTypes[k]
		if !ok {
			return nil, fmt.Errorf("openapi: payload key %q of %s has no type", k, t)
		}
		props[k] = f()
	}
	return object(slices.Clone(svc.PayloadKeys[t]), props), nil
}

// runtimeEvent is RuntimeEvent as its MarshalJSON writes it, one schema
// per event type (its payload's keys) under oneOf, told apart by
// event_type.
func runtimeEvent() (*jsonschema.Schema, error) {
	var variants []*jsonschema.Schema
	for _, t := range svc.EventTypes {
		p, err := payloadSchema(t)
		if err != nil {
			return nil, err
		}
		variants = append(variants, &jsonschema.Schema{
			Type:     "object",
			Required: []string{"event_type", "payload"},
			Properties: map[string]*jsonschema.Schema{
				"event_type": {Const: jsonschema.Ptr[any](string(t))},
				"payload":    p,
			},
		})
	}
	return &jsonschema.Schema{
		Type:        "object",
		Description: "One thing that happened in the runtime; payload keys depend on event_type.",
		Required:    []string{"event_type", "timestamp", "agent_name", "task_id", "trace_id", "parent_trace_id", "payload"},
		Properties: map[string]*jsonschema.Schema{
			"event_type":      {Type: "string", Enum: enum(svc.EventTypes)},
			"timestamp":       {Type: "string", Format: "date-time"},
			"agent_name":      str(),
			"task_id":         nullableStr(),
			"trace_id":        str(),
			"parent_trace_id": nullableStr(),
			"span_id":         str(),
			"parent_span_id":  str(),
			"payload":         {Type: "object"},
		},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		OneOf:                variants,
	}, nil
}

func enum[T ~string](vs []T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// runEvent is RunEvent as its MarshalJSON writes it.
func runEvent() *jsonschema.Schema {
	return object([]string{"seq", "type", "run_id", "agent", "task_id", "error", "timestamp"},
		map[string]*jsonschema.Schema{
			"seq":       intg(),
			"type":      str(),
			"run_id":    str(),
			"agent":     nullableStr(),
			"task_id":   nullableStr(),
			"error":     nullableStr(),
			"timestamp": {Type: "string", Format: "date-time"},
			// Only a delta (type "delta", /runs/{id}/stream?deltas=true)
			// has it: the fragment of the streamed answer.
			"text": str(),
			// Only run_waiting has it: what the run waits for.
			"request": ref("WaitRequest"),
		})
}

// components lists the document's schemas in order.
func components() ([]component, error) {
	ev, err := runtimeEvent()
	if err != nil {
		return nil, err
	}
	return []component{
		{name: "TaskSpec", typ: reflect.TypeFor[svc.TaskSpec]()},
		{name: "RunBody", hand: &jsonschema.Schema{
			Description: `The body of a run: a TaskSpec, or {"task": TaskSpec, "request_id": ...}.`,
			OneOf:       []*jsonschema.Schema{ref("TaskSpec"), ref("TaskEnvelope")},
		}},
		{name: "TaskEnvelope", typ: reflect.TypeFor[runEnvelope]()},
		{name: "GatherRequest", typ: reflect.TypeFor[svc.GatherRequest]()},
		{name: "SubmitRequest", typ: reflect.TypeFor[submitBody]()},
		{name: "SubmitReply", typ: reflect.TypeFor[submitReply]()},
		{name: "AgentResult", typ: reflect.TypeFor[svc.AgentResult]()},
		{name: "ErrorInfo", typ: reflect.TypeFor[svc.ErrorInfo]()},
		{name: "GroupResult", typ: reflect.TypeFor[svc.GroupResult]()},
		{name: "RunResult", hand: &jsonschema.Schema{
			Description: `A group run's answer: an AgentResult when one terminal node fired, a GroupResult (with "group": true) when several did.`,
			OneOf:       []*jsonschema.Schema{ref("AgentResult"), ref("GroupResult")},
		}},
		{name: "StreamLine", typ: reflect.TypeFor[svc.StreamLine]()},
		{name: "GatherSummary", typ: reflect.TypeFor[svc.GatherSummary]()},
		{name: "RunStatus", typ: reflect.TypeFor[svc.RunStatus]()},
		{name: "WaitRequest", typ: reflect.TypeFor[svc.WaitRequest]()},
		{name: "ResumeRequest", typ: reflect.TypeFor[resumeBody]()},
		{name: "RunProgress", typ: reflect.TypeFor[svc.RunProgress]()},
		{name: "RunEvent", hand: runEvent()},
		{name: "RuntimeEvent", hand: ev},
		{name: "RunPage", typ: reflect.TypeFor[svc.RunPage]()},
		{name: "Usage", typ: reflect.TypeFor[svc.Usage]()},
		{name: "ToolUsage", typ: reflect.TypeFor[svc.ToolUsage]()},
		{name: "ToolDescriptor", typ: reflect.TypeFor[svc.ToolDescriptor]()},
		{name: "RuntimeStats", typ: reflect.TypeFor[svc.RuntimeStats]()},
		{name: "BudgetStatus", typ: reflect.TypeFor[svc.BudgetStatus]()},
		{name: "EventTree", typ: reflect.TypeFor[svc.EventTree]()},
		{name: "TreeNode", typ: reflect.TypeFor[svc.TreeNode]()},
		{name: "AgentSchema", typ: reflect.TypeFor[svc.AgentSchema]()},
		{name: "Topology", typ: reflect.TypeFor[svc.Topology]()},
		{name: "BatchRequest", typ: reflect.TypeFor[svc.BatchRequest]()},
		{name: "BatchAccepted", typ: reflect.TypeFor[svc.BatchAccepted]()},
		{name: "BatchStatus", typ: reflect.TypeFor[svc.BatchStatus]()},
		{name: "BatchCounts", typ: reflect.TypeFor[svc.BatchCounts]()},
		{name: "BatchPage", typ: reflect.TypeFor[svc.BatchPage]()},
		{name: "BatchResultLine", typ: reflect.TypeFor[svc.BatchResultLine]()},
		{name: "CallbackStatus", typ: reflect.TypeFor[svc.CallbackStatus]()},
		{name: "Health", typ: reflect.TypeFor[health]()},
		{name: "Problem", typ: reflect.TypeFor[svc.Problem]()},
	}, nil
}

// schemas generates every component. A field whose type is itself a
// component becomes a $ref to it, which also lets TreeNode hold its
// children.
func schemas() (map[string]*jsonschema.Schema, error) {
	comps, err := components()
	if err != nil {
		return nil, err
	}
	refs := map[reflect.Type]*jsonschema.Schema{
		reflect.TypeFor[json.RawMessage]():  {Description: "any JSON value"},
		reflect.TypeFor[time.Time]():        {Type: "string", Format: "date-time"},
		reflect.TypeFor[svc.RunResult]():    ref("RunResult"),
		reflect.TypeFor[svc.RuntimeEvent](): ref("RuntimeEvent"),
		reflect.TypeFor[svc.RunEvent]():     ref("RunEvent"),
	}
	for _, c := range comps {
		if c.typ != nil {
			refs[c.typ] = ref(c.name)
		}
	}
	out := map[string]*jsonschema.Schema{}
	for _, c := range comps {
		if c.hand != nil {
			out[c.name] = c.hand
			continue
		}
		// The type itself maps to its $ref; generate from an unnamed copy
		// of its fields so only the fields' types are replaced.
		s, err := jsonschema.ForType(unnamed(c.typ), &jsonschema.ForOptions{TypeSchemas: refs})
		if err != nil {
			return nil, fmt.Errorf("openapi: schema %s: %w", c.name, err)
		}
		s.PropertyOrder = nil
		out[c.name] = s
	}
	return out, nil
}

// unnamed returns a struct type with t's fields and no name.
func unnamed(t reflect.Type) reflect.Type {
	var fields []reflect.StructField
	for f := range t.Fields() {
		if f.IsExported() {
			fields = append(fields, f)
		}
	}
	return reflect.StructOf(fields)
}
