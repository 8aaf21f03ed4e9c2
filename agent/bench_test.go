package agent_test

import (
	"context"
	"encoding/json"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
)

// BenchmarkRunEcho is the hot path the runtime's throughput rests on: an
// agent without tools or schemas on the deterministic test:echo model.
func BenchmarkRunEcho(b *testing.B) {
	c := mustCompile(b, svc.Agent{Name: "echo", Model: "test:echo"}, nil)
	inv := &agent.Invocation{Agent: c, Input: json.RawMessage(`{"q":"hello world"}`),
		TaskID: "t", TraceID: "r", Emitter: svc.NopEmitter{}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := agent.Run(ctx, inv); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunLoop measures the loop alone, with a model that costs nothing.
func BenchmarkRunLoop(b *testing.B) {
	c := mustCompile(b, svc.Agent{Name: "echo", Model: "fake:m"}, map[string]svc.Model{"m": constModel{}})
	inv := &agent.Invocation{Agent: c, Input: json.RawMessage(`{"q":"hello world"}`), Emitter: svc.NopEmitter{}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := agent.Run(ctx, inv); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunTool adds one tool round trip with its events.
func BenchmarkRunTool(b *testing.B) {
	m := svc.ModelFunc(func(_ context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
		if len(req.Messages) == 1 {
			return callTool("noop", `{}`), nil
		}
		return svc.ModelResponse{Output: req.Messages[0].Content}, nil
	})
	c := mustCompile(b, svc.Agent{Name: "tooled", Model: "fake:m", Tools: []svc.Tool{constTool("noop", svc.AccessRead, `1`)}},
		map[string]svc.Model{"m": m})
	inv := &agent.Invocation{Agent: c, Input: json.RawMessage(`{"q":"hello world"}`), Emitter: svc.NopEmitter{}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := agent.Run(ctx, inv); err != nil {
			b.Fatal(err)
		}
	}
}

// constModel answers "ok" without allocating.
type constModel struct{}

var okOutput = json.RawMessage(`"ok"`)

func (constModel) Generate(context.Context, svc.ModelRequest) (svc.ModelResponse, error) {
	return svc.ModelResponse{Output: okOutput, TokensUsed: 1}, nil
}
