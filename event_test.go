package svc_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/svc-dev/svc"
)

func TestRuntimeEventMarshal(t *testing.T) {
	ts := time.Date(2026, 3, 4, 5, 6, 7, 8000, time.FixedZone("CET", 3600))
	tests := []struct {
		name string
		ev   svc.RuntimeEvent
		want string
	}{
		{
			name: "run level, nil payload",
			ev:   svc.RuntimeEvent{EventType: svc.EventBatchStarted, Timestamp: ts, AgentName: "a", TraceID: "tr"},
			want: `{"event_type":"batch_started","timestamp":"2026-03-04T04:06:07.000008Z","agent_name":"a","task_id":null,"trace_id":"tr","parent_trace_id":null,"payload":{}}`,
		},
		{
			name: "task level with parent",
			ev: svc.RuntimeEvent{EventType: svc.EventAgentCompleted, Timestamp: ts.UTC(), AgentName: "a", TaskID: "t",
				TraceID: "tr", ParentTraceID: "ptr", Payload: svc.Payload{"tokens_used": 3}},
			want: `{"event_type":"agent_completed","timestamp":"2026-03-04T04:06:07.000008Z","agent_name":"a","task_id":"t","trace_id":"tr","parent_trace_id":"ptr","payload":{"tokens_used":3}}`,
		},
		{
			name: "empty payload map",
			ev:   svc.RuntimeEvent{EventType: svc.EventAgentSpawned, Timestamp: ts, Payload: svc.Payload{}},
			want: `{"event_type":"agent_spawned","timestamp":"2026-03-04T04:06:07.000008Z","agent_name":"","task_id":null,"trace_id":"","parent_trace_id":null,"payload":{}}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, v := range map[string]any{"value": tt.ev, "pointer": &tt.ev} {
				b, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				if string(b) != tt.want {
					t.Errorf("%s: got  %s\nwant %s", name, b, tt.want)
				}
			}
		})
	}
}

func TestRuntimeEventRoundTrip(t *testing.T) {
	ts := time.Date(2026, 1, 2, 3, 4, 5, 600, time.UTC)
	events := []svc.RuntimeEvent{
		{EventType: svc.EventAgentFailed, Timestamp: ts, AgentName: "x", TaskID: "t1", TraceID: "r1", ParentTraceID: "p1",
			Payload: svc.Payload{"duration_ms": 1.5, "error": "boom", "backend": "local", "reason": "timeout"}},
		{EventType: svc.EventWorkerHeartbeat, Timestamp: ts, AgentName: "rt-1", TraceID: "r2",
			Payload: svc.Payload{"agent_subscriptions": []any{"a", "b"}, "in_flight": 2.0, "nested": map[string]any{"k": nil}}},
		{EventType: svc.EventBatchCompleted, Timestamp: ts, AgentName: "y", TraceID: "r3"},
	}
	for _, ev := range events {
		t.Run(string(ev.EventType), func(t *testing.T) {
			b, err := json.Marshal(ev)
			if err != nil {
				t.Fatal(err)
			}
			var got svc.RuntimeEvent
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			want := ev
			if want.Payload == nil {
				want.Payload = svc.Payload{} // written as {}, read back as an empty map
			}
			if !got.Timestamp.Equal(want.Timestamp) {
				t.Errorf("timestamp %v, want %v", got.Timestamp, want.Timestamp)
			}
			got.Timestamp, want.Timestamp = time.Time{}, time.Time{}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("round trip:\n got %#v\nwant %#v", got, want)
			}
		})
	}
}

func TestRuntimeEventUnmarshal(t *testing.T) {
	t.Run("null and absent fields become empty", func(t *testing.T) {
		var ev svc.RuntimeEvent
		in := `{"event_type":"agent_spawned","timestamp":"2026-01-01T00:00:00Z","agent_name":"a","task_id":null,"trace_id":"t","payload":null}`
		if err := json.Unmarshal([]byte(in), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.TaskID != "" || ev.ParentTraceID != "" || ev.Payload != nil {
			t.Errorf("got %+v", ev)
		}
		b, _ := json.Marshal(ev)
		if !bytes.Contains(b, []byte(`"payload":{}`)) || !bytes.Contains(b, []byte(`"task_id":null`)) {
			t.Errorf("re-marshalled %s", b)
		}
	})
	t.Run("decoding replaces every field", func(t *testing.T) {
		ev := svc.RuntimeEvent{EventType: svc.EventAgentFailed, AgentName: "old", TaskID: "old", ParentTraceID: "old",
			Payload: svc.Payload{"stale": true}}
		if err := json.Unmarshal([]byte(`{"event_type":"agent_spawned","agent_name":"new"}`), &ev); err != nil {
			t.Fatal(err)
		}
		want := svc.RuntimeEvent{EventType: svc.EventAgentSpawned, AgentName: "new"}
		if !reflect.DeepEqual(ev, want) {
			t.Errorf("got %+v, want %+v", ev, want)
		}
	})
	for name, in := range map[string]string{
		"not an object":  `[1]`,
		"bad timestamp":  `{"timestamp":"yesterday"}`,
		"task_id number": `{"task_id":7}`,
		"payload list":   `{"payload":[1]}`,
		"truncated":      `{"event_type":"a"`,
	} {
		t.Run(name, func(t *testing.T) {
			var ev svc.RuntimeEvent
			if err := json.Unmarshal([]byte(in), &ev); err == nil {
				t.Errorf("Unmarshal(%s) = %+v, want an error", in, ev)
			}
		})
	}
}

func TestEventTypesAndPayloadKeys(t *testing.T) {
	// The spec's sixteen, rate_limited (issue 29), run_resumed (issue 30)
	// and run_waiting (issue 31).
	if len(svc.EventTypes) != 19 {
		t.Errorf("%d event types, want the spec's 16, rate_limited, run_resumed and run_waiting", len(svc.EventTypes))
	}
	failures := []svc.EventType{svc.EventAgentFailed, svc.EventToolCallFailed, svc.EventBudgetExceeded, svc.EventDepthLimitExceeded}
	for _, et := range svc.EventTypes {
		if keys := svc.PayloadKeys[et]; len(keys) == 0 {
			t.Errorf("%s has no payload keys", et)
		}
		if got, want := et.IsFailure(), slices.Contains(failures, et); got != want {
			t.Errorf("%s.IsFailure() = %v, want %v", et, got, want)
		}
	}
	// The spec's sixteen and agent_delta, which is beyond the spec.
	if len(svc.PayloadKeys) != len(svc.EventTypes)+1 || len(svc.PayloadKeys[svc.EventAgentDelta]) == 0 {
		t.Errorf("PayloadKeys has %d entries for %d event types and agent_delta", len(svc.PayloadKeys), len(svc.EventTypes))
	}
}

func TestEmitterFunc(t *testing.T) {
	var got []svc.EventType
	var em svc.Emitter = svc.EmitterFunc(func(ev svc.RuntimeEvent) { got = append(got, ev.EventType) })
	em.Emit(svc.RuntimeEvent{EventType: svc.EventAgentSpawned})
	svc.NopEmitter{}.Emit(svc.RuntimeEvent{EventType: svc.EventAgentFailed})
	if !slices.Equal(got, []svc.EventType{svc.EventAgentSpawned}) {
		t.Errorf("got %v", got)
	}
}

// FuzzRuntimeEventUnmarshal checks that whatever UnmarshalJSON accepts,
// MarshalJSON can write, and that one decode-encode cycle reaches a fixed
// point (empty strings and null, nil and empty payloads normalise once).
func FuzzRuntimeEventUnmarshal(f *testing.F) {
	f.Add([]byte(`{"event_type":"agent_completed","timestamp":"2026-01-02T03:04:05.000000006+01:00","agent_name":"a","task_id":"t","trace_id":"r","parent_trace_id":null,"payload":{"duration_ms":1.5,"tokens_used":3}}`))
	f.Add([]byte(`{"event_type":"batch_started","task_id":"","parent_trace_id":"","payload":null}`))
	f.Add([]byte(`{"payload":{"a":[1,{"b":null}],"c":"\u00e9"}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"timestamp":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"timestamp":"0000-01-01T00:00:00+01:00"}`))
	f.Add([]byte(`{"TASK_ID":"case","Payload":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var ev svc.RuntimeEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return
		}
		if y := ev.Timestamp.UTC().Year(); y < 0 || y > 9999 {
			t.Fatalf("accepted %q, whose UTC timestamp cannot be written again", data)
		}
		b1, err := json.Marshal(ev)
		if err != nil {
			t.Fatalf("Marshal of decoded %q: %v", data, err)
		}
		var ev2 svc.RuntimeEvent
		if err := json.Unmarshal(b1, &ev2); err != nil {
			t.Fatalf("Unmarshal of own output %s: %v", b1, err)
		}
		if ev2.TaskID != ev.TaskID || ev2.ParentTraceID != ev.ParentTraceID || ev2.EventType != ev.EventType ||
			ev2.AgentName != ev.AgentName || ev2.TraceID != ev.TraceID || !ev2.Timestamp.Equal(ev.Timestamp) {
			t.Fatalf("fields changed over a round trip:\n%+v\n%+v", ev, ev2)
		}
		b2, err := json.Marshal(ev2)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b1, b2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", b1, b2)
		}
	})
}

func TestFailureKind(t *testing.T) {
	cases := []struct {
		p    svc.Payload
		want svc.Kind
	}{
		{svc.Payload{"reason": "BudgetExceededError", "error": "ModelError: x"}, svc.KindBudgetExceeded},
		{svc.Payload{"reason": "ModelError"}, svc.KindModel},
		// The error text is never parsed.
		{svc.Payload{"error": "ModelError: all models failed"}, svc.KindToolExecution},
		{svc.Payload{"error_type": "ModelError"}, svc.KindToolExecution},
		// Reasons written by earlier versions still classify.
		{svc.Payload{"error": "NotAKind: x", "reason": "timeout"}, svc.KindTimeout},
		{svc.Payload{"error": "boom", "reason": "depth_limit"}, svc.KindDepthLimit},
		{svc.Payload{"reason": "invalid_output"}, svc.KindOutputValidation},
		{svc.Payload{"error": "boom"}, svc.KindToolExecution},
		{svc.Payload{"error_type": 42, "error": 7}, svc.KindToolExecution},
		{nil, svc.KindToolExecution},
	}
	for _, c := range cases {
		if got := svc.FailureKind(c.p, svc.KindToolExecution); got != c.want {
			t.Errorf("svc.FailureKind(%v) = %s, want %s", c.p, got, c.want)
		}
	}
}

// Span ids are envelope fields, written only when set.
func TestRuntimeEventSpanIDs(t *testing.T) {
	ev := svc.RuntimeEvent{EventType: svc.EventAgentSpawned, AgentName: "a", TraceID: "t", SpanID: "s1", ParentSpanID: "p1"}
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte(`"span_id":"s1","parent_span_id":"p1"`)) || bytes.Contains(b, []byte(`"payload":{"span_id"`)) {
		t.Errorf("JSON %s", b)
	}
	var back svc.RuntimeEvent
	if err := json.Unmarshal(b, &back); err != nil || back.SpanID != "s1" || back.ParentSpanID != "p1" {
		t.Errorf("round trip %+v, %v", back, err)
	}
	b, _ = json.Marshal(svc.RuntimeEvent{EventType: svc.EventAgentSpawned})
	if bytes.Contains(b, []byte("span_id")) {
		t.Errorf("unset span ids written: %s", b)
	}
}
