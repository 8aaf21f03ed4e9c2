package agent_test

import (
	"context"
	"encoding/json"
	"iter"
	"strings"
	"testing"

	svc "github.com/svc-dev/svc"
)

// batchFake is a model with a batch API that is never called: OneCall
// only needs to see one.
type batchFake struct{ svc.ModelFunc }

func (batchFake) SubmitCalls(context.Context, []svc.BatchCall) (string, error) { return "", nil }
func (batchFake) PollCalls(context.Context, string, *svc.ModelRequest) (svc.ProviderBatch, error) {
	return svc.ProviderBatch{}, nil
}
func (batchFake) CallAnswers(context.Context, string, *svc.ModelRequest) iter.Seq2[svc.BatchAnswer, error] {
	return func(func(svc.BatchAnswer, error) bool) {}
}
func (batchFake) CancelCalls(context.Context, string, *svc.ModelRequest) error { return nil }

// The one call of a provider batch is the call the loop would make (the
// instructions, the output schema, the input after pre_process as the
// user message), and its answer is checked and post-processed as the
// loop's: an answer that does not match output_type fails, with no
// corrective call.
func TestOneCall(t *testing.T) {
	models := map[string]svc.Model{"b": batchFake{}}
	a := svc.Agent{Name: "sum", Model: "fake:b", Instructions: "Add.",
		InputType:  json.RawMessage(`{"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}`),
		OutputType: json.RawMessage(`{"type": "integer"}`),
		PreProcess: func(_ context.Context, v json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`{"n":` + strings.TrimSuffix(strings.TrimPrefix(string(v), `{"n":`), "}") + `,"pre":true}`), nil
		},
		PostProcess: func(_ context.Context, v json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`[` + string(v) + `]`), nil
		},
	}
	one, err := mustCompile(t, a, models).OneCall()
	if err != nil {
		t.Fatal(err)
	}
	req, err := one.Request(t.Context(), json.RawMessage(`{ "n": 2 }`))
	if err != nil {
		t.Fatal(err)
	}
	if req.Model != "b" || req.Instructions != "Add." || len(req.OutputSchema) == 0 || len(req.Messages) != 1 ||
		req.Messages[0].Role != svc.RoleUser || string(req.Messages[0].Content) != `{"n":2,"pre":true}` || len(req.Tools) != 0 {
		t.Fatalf("request %+v", req)
	}
	if _, err := one.Request(t.Context(), json.RawMessage(`"two"`)); svc.KindOf(err) != svc.KindSpecValidation {
		t.Fatalf("an input the schema refuses: %v", err)
	}
	out, err := one.Output(t.Context(), &svc.ModelResponse{Output: json.RawMessage(`3`)})
	if err != nil || string(out) != `[3]` {
		t.Fatalf("output %s, %v", out, err)
	}
	if _, err := one.Output(t.Context(), &svc.ModelResponse{Output: json.RawMessage(`"three"`)}); svc.KindOf(err) != svc.KindOutputValidation {
		t.Fatalf("an answer the schema refuses: %v", err)
	}
	if _, err := one.Output(t.Context(), &svc.ModelResponse{ToolCalls: []svc.ToolCall{{Name: "x"}}}); svc.KindOf(err) != svc.KindOutputValidation {
		t.Fatalf("an answer with tool calls: %v", err)
	}
	// A model without a batch API, and an agent with tools, do not qualify.
	plain := map[string]svc.Model{"p": svc.ModelFunc(func(context.Context, svc.ModelRequest) (svc.ModelResponse, error) {
		return svc.ModelResponse{}, nil
	})}
	if _, err := mustCompile(t, svc.Agent{Name: "p", Model: "fake:p"}, plain).OneCall(); err == nil || !strings.Contains(err.Error(), "no batch API") {
		t.Fatalf("a model without a batch API: %v", err)
	}
	tooled := svc.Agent{Name: "t", Model: "fake:b", Tools: []svc.Tool{constTool("lookup", svc.AccessRead, `1`)}}
	if _, err := mustCompile(t, tooled, models).OneCall(); svc.KindOf(err) != svc.KindSpecValidation || !strings.Contains(err.Error(), "tools (lookup)") {
		t.Fatalf("an agent with tools: %v", err)
	}
}
