package svc_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/svc-dev/svc"
)

func TestAgentResultMarshal(t *testing.T) {
	meta := svc.ResultMetadata{TraceID: "tr", DurationMS: 1.5, TokensUsed: 3, Model: "test:echo", Attempts: 1, Backend: svc.BackendLocal}
	const metaJSON = `"metadata":{"trace_id":"tr","duration_ms":1.5,"tokens_used":3,"cost_usd":0,"model":"test:echo","attempts":1,"backend":"local"}`
	tests := []struct {
		name string
		res  svc.AgentResult
		want string
	}{
		{"nil output", svc.AgentResult{AgentName: "a", TaskID: "t", Success: true, Metadata: meta},
			`{"agent_name":"a","task_id":"t","success":true,"output":null,"error":null,` + metaJSON + `}`},
		{"empty output", svc.AgentResult{AgentName: "a", TaskID: "t", Output: json.RawMessage{}, Metadata: meta},
			`{"agent_name":"a","task_id":"t","success":false,"output":null,"error":null,` + metaJSON + `}`},
		{"output", svc.AgentResult{AgentName: "a", TaskID: "t", Success: true, Output: json.RawMessage(`{"a":1}`), Metadata: meta},
			`{"agent_name":"a","task_id":"t","success":true,"output":{"a":1},"error":null,` + metaJSON + `}`},
		{"error without reason", svc.AgentResult{AgentName: "a", TaskID: "t",
			Error: &svc.ErrorInfo{Type: "ModelError", Message: "down"}, Metadata: meta},
			`{"agent_name":"a","task_id":"t","success":false,"output":null,"error":{"type":"ModelError","message":"down"},` + metaJSON + `}`},
		{"error with reason", svc.AgentResult{AgentName: "a", TaskID: "t",
			Error: &svc.ErrorInfo{Type: "TimeoutError", Message: "slow", Reason: "timeout"}, Metadata: meta},
			`{"agent_name":"a","task_id":"t","success":false,"output":null,"error":{"type":"TimeoutError","message":"slow","reason":"timeout"},` + metaJSON + `}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, v := range map[string]any{"value": tt.res, "pointer": &tt.res, "in a slice": []svc.AgentResult{tt.res}} {
				b, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				want := tt.want
				if name == "in a slice" {
					want = "[" + want + "]"
				}
				if string(b) != want {
					t.Errorf("%s:\n got %s\nwant %s", name, b, want)
				}
			}
		})
	}
}

func TestAgentResultRoundTrip(t *testing.T) {
	in := svc.AgentResult{AgentName: "a", TaskID: "t", Success: false, Output: json.RawMessage(`[1,"x"]`),
		Error:    &svc.ErrorInfo{Type: "ModelError", Message: "m", Reason: "model_error"},
		Metadata: svc.ResultMetadata{TraceID: "tr", DurationMS: 2, TokensUsed: 9, CostUSD: 0.25, Model: "test:echo", Attempts: 2, Backend: "local"}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out svc.AgentResult
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n got %+v\nwant %+v", out, in)
	}
}

func TestTaskSpecJSON(t *testing.T) {
	b, err := json.Marshal(svc.TaskSpec{Input: json.RawMessage(`"hi"`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `{"input":"hi"}` {
		t.Errorf("got %s: optional fields must be omitted", b)
	}
	var ts svc.TaskSpec
	if err := json.Unmarshal([]byte(`{"id":"i","input":{"x":[1]},"request_id":"r","metadata":{"k":"v"}}`), &ts); err != nil {
		t.Fatal(err)
	}
	want := svc.TaskSpec{ID: "i", Input: json.RawMessage(`{"x":[1]}`), RequestID: "r", Metadata: map[string]string{"k": "v"}}
	if !reflect.DeepEqual(ts, want) {
		t.Errorf("got %+v, want %+v", ts, want)
	}
}

func TestCheckGatherConcurrency(t *testing.T) {
	tests := []struct {
		in, want int
		ok       bool
	}{
		{0, 0, false}, // an explicit 0 is refused; absent is the default
		{1, 1, true},
		{7, 7, true},
		{10000, 10000, true},
		{-1, 0, false},
		{10001, 0, false},
		{-1 << 31, 0, false},
	}
	for _, tt := range tests {
		got, err := svc.CheckGatherConcurrency(tt.in)
		if tt.ok {
			if err != nil || got != tt.want {
				t.Errorf("CheckGatherConcurrency(%d) = %d, %v; want %d, nil", tt.in, got, err, tt.want)
			}
			continue
		}
		if !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("CheckGatherConcurrency(%d) error = %v, want a SpecValidationError", tt.in, err)
		}
	}
}

func TestModelResponseTokens(t *testing.T) {
	tests := []struct {
		r    svc.ModelResponse
		want int64
	}{
		{svc.ModelResponse{InputTokens: 2, OutputTokens: 3}, 5},
		{svc.ModelResponse{InputTokens: 2, OutputTokens: 3, TokensUsed: 10}, 10},
		{svc.ModelResponse{}, 0},
	}
	for _, tt := range tests {
		if got := tt.r.Tokens(); got != tt.want {
			t.Errorf("%+v.Tokens() = %d, want %d", tt.r, got, tt.want)
		}
	}
}
