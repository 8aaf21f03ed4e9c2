package providers_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/model/providers"
)

// An agent on each provider added for issue 33 answers through its SDK
// against llmsim, plain and streamed, and its result is priced from the
// built-in table by the model id the agent names.
func TestAgentOnEveryNewProvider(t *testing.T) {
	sim := startSim(t, nil)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTEST")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	for _, c := range []struct {
		model    string
		settings map[string]any
	}{
		{"google:gemini-2.5-flash", map[string]any{"base_url": sim.URL(), "api_key": "g-key"}},
		{"gemini:gemini-2.5-flash-lite", map[string]any{"base_url": sim.URL(), "api_key": "g-key"}},
		{"bedrock:amazon.nova-lite-v1:0", map[string]any{"base_url": sim.URL()}},
		{"bedrock:us.anthropic.claude-sonnet-4-5-20250929-v1:0", map[string]any{"base_url": sim.URL()}},
		{"azure:gpt-4o-mini", map[string]any{"base_url": sim.URL(), "api_key": "az-key"}},
		{"groq:llama-3.3-70b-versatile", map[string]any{"base_url": sim.URL() + "/v1", "api_key": "gsk-key"}},
		{"mistral:mistral-small-latest", map[string]any{"base_url": sim.URL() + "/v1", "api_key": "m-key"}},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", c.model, stream), func(t *testing.T) {
				settings := map[string]any{"stream": stream}
				for k, v := range c.settings {
					settings[k] = v
				}
				comp, err := agent.Compile(svc.Agent{Name: "echo", Model: c.model, ModelSettings: settings}, providers.Default())
				if err != nil {
					t.Fatal(err)
				}
				var sink deltaLog
				out, err := agent.Run(t.Context(), &agent.Invocation{Agent: comp, Input: json.RawMessage(`"the quick brown fox"`),
					Emitter: agent.WithDeltaSink(nil, &sink)})
				if err != nil {
					t.Fatal(err)
				}
				if string(out.Output) != `"the quick brown fox"` || out.TokensUsed == 0 || out.CostUSD <= 0 {
					t.Errorf("output %s, %d tokens, $%g; want the echo, counted and priced", out.Output, out.TokensUsed, out.CostUSD)
				}
				if got := lastAnswer(sink.get()); stream && got != "the quick brown fox" {
					t.Errorf("streamed %q", got)
				}
			})
		}
	}
}

// builtin_tools: [web_search] on an agent of an anthropic model sends
// Anthropic's web search server tool with every call and the answer is
// the model's text; gemini and openai fallbacks have it too, and an agent
// whose chain has a model without it (a preset) does not compile, naming
// the model.
func TestAgentWithServerTool(t *testing.T) {
	var mu sync.Mutex
	var tools []any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		mu.Lock()
		tools = body["tools"].([]any)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-haiku-4-5","content":[
			{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{"query":"svc"}},
			{"type":"web_search_tool_result","tool_use_id":"srvtoolu_1","content":[{"type":"web_search_result","url":"https://example.com","title":"svc","encrypted_content":"e","page_age":null}]},
			{"type":"text","text":"svc is an agent runtime."}],
			"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":50,"output_tokens":10}}`)
	}))
	t.Cleanup(srv.Close)
	a := svc.Agent{Name: "researcher", Model: "anthropic:claude-haiku-4-5", BuiltinTools: []string{"web_search"},
		ModelSettings: map[string]any{"base_url": srv.URL, "api_key": "sk-test"}}
	comp, err := agent.Compile(a, providers.Default())
	if err != nil {
		t.Fatal(err)
	}
	out, err := agent.Run(t.Context(), &agent.Invocation{Agent: comp, Input: json.RawMessage(`"what is svc?"`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(out.Output) != `"svc is an agent runtime."` {
		t.Errorf("output %s", out.Output)
	}
	mu.Lock()
	sent := fmt.Sprint(tools)
	mu.Unlock()
	if !strings.Contains(sent, "web_search_20250305") {
		t.Errorf("tools sent %s; want web_search_20250305", sent)
	}

	a.FallbackModels = []string{"gemini:gemini-2.5-flash"}
	if _, err := agent.Compile(a, providers.Default()); err != nil {
		t.Errorf("a gemini fallback, which has web_search too: %v", err)
	}
	a.FallbackModels = []string{"openai:gpt-4o-mini", "groq:llama-3.3-70b-versatile"}
	_, err = agent.Compile(a, providers.Default())
	var se *svc.Error
	if !errors.As(err, &se) || se.Kind != svc.KindSpecValidation || !strings.Contains(err.Error(), "groq:llama-3.3-70b-versatile") ||
		!strings.Contains(err.Error(), "fallback_models[1]") || !strings.Contains(err.Error(), "web_search") {
		t.Errorf("a fallback without web_search: %v; want a SpecValidationError naming it", err)
	}
}
