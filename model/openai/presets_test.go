package openai_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/openai"
)

// recorder is a transport that answers every request with a one-word
// completion and keeps the requests: where a preset's call goes and with
// which key, without a network.
type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (rt *recorder) RoundTrip(r *http.Request) (*http.Response, error) {
	rt.mu.Lock()
	rt.reqs = append(rt.reqs, r)
	rt.mu.Unlock()
	body := `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(body)), Request: r}, nil
}

func ask(text string) svc.ModelRequest {
	b, _ := json.Marshal(text)
	return svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: b}}, Settings: map[string]any{"max_retries": 0}}
}

// Each preset calls its service's base URL with the key from its own
// variable, and never sends OPENAI_API_KEY; a preset that needs a key
// and has none fails before any request, naming the variable.
func TestPresetsResolveToTheirBaseURLAndKey(t *testing.T) {
	want := map[string]struct{ url, keyEnv string }{
		"groq":       {"https://api.groq.com/openai/v1/chat/completions", "GROQ_API_KEY"},
		"mistral":    {"https://api.mistral.ai/v1/chat/completions", "MISTRAL_API_KEY"},
		"together":   {"https://api.together.xyz/v1/chat/completions", "TOGETHER_API_KEY"},
		"openrouter": {"https://openrouter.ai/api/v1/chat/completions", "OPENROUTER_API_KEY"},
		"ollama":     {"http://localhost:11434/v1/chat/completions", "OLLAMA_API_KEY"},
		"vllm":       {"", "VLLM_API_KEY"},
	}
	if len(openai.Presets) != len(want) {
		t.Fatalf("%d presets, want %d", len(openai.Presets), len(want))
	}
	t.Setenv("OPENAI_API_KEY", "sk-openai-secret")
	t.Setenv("OPENAI_BASE_URL", "http://openai.invalid/v1")
	for _, p := range openai.Presets {
		t.Run(p.Name, func(t *testing.T) {
			w, ok := want[p.Name]
			if !ok {
				t.Fatalf("unexpected preset %q", p.Name)
			}
			if p.KeyEnv != w.keyEnv {
				t.Errorf("key variable %s, want %s", p.KeyEnv, w.keyEnv)
			}
			t.Setenv(p.BaseURLEnv, "")
			call := func() (*recorder, error) {
				rt := &recorder{}
				cfg := p.Config()
				cfg.HTTPClient = &http.Client{Transport: rt}
				m, err := openai.NewWithConfig("some-model", cfg)
				if err != nil {
					t.Fatal(err)
				}
				_, err = m.Generate(t.Context(), ask("hello"))
				return rt, err
			}

			t.Setenv(p.KeyEnv, "")
			rt, err := call()
			switch {
			case w.url == "": // vllm: no default endpoint
				pe, ok := errors.AsType[*model.ProviderError](err)
				if !ok || pe.Provider != p.Name || !strings.Contains(pe.Message, p.BaseURLEnv) || len(rt.reqs) != 0 {
					t.Fatalf("no base URL: %v after %d requests; want a %s error naming %s before any request", err, len(rt.reqs), p.Name, p.BaseURLEnv)
				}
			case p.KeyRequired:
				pe, ok := errors.AsType[*model.ProviderError](err)
				if !ok || pe.Class != model.ClassAuth || pe.Provider != p.Name || !strings.Contains(pe.Message, p.KeyEnv) || len(rt.reqs) != 0 {
					t.Fatalf("no key: %v after %d requests; want a %s auth error naming %s before any request", err, len(rt.reqs), p.Name, p.KeyEnv)
				}
			default:
				if err != nil || len(rt.reqs) != 1 || rt.reqs[0].Header.Get("Authorization") != "" {
					t.Fatalf("no key: %v, %d requests; want one without Authorization", err, len(rt.reqs))
				}
			}

			if w.url == "" {
				t.Setenv(p.BaseURLEnv, "http://gpu-box:8000/v1")
				w.url = "http://gpu-box:8000/v1/chat/completions"
			}
			t.Setenv(p.KeyEnv, "key-of-"+p.Name)
			rt, err = call()
			if err != nil {
				t.Fatal(err)
			}
			if len(rt.reqs) != 1 {
				t.Fatalf("%d requests, want 1", len(rt.reqs))
			}
			r := rt.reqs[0]
			if r.URL.String() != w.url {
				t.Errorf("called %s, want %s", r.URL, w.url)
			}
			if got := r.Header.Get("Authorization"); got != "Bearer key-of-"+p.Name {
				t.Errorf("Authorization %q, want the key from %s", got, p.KeyEnv)
			}
		})
	}
}

// A real call through a preset, its base URL overridden by its variable,
// reaches llmsim with the preset's key, through the SDK, tool calls and
// usage included, and the registry resolves "groq:..." to it.
func TestPresetCallsLLMSim(t *testing.T) {
	sim := llmsim.New(llmsim.Config{Keys: []string{"gsk-test"}, Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Contains: "weather"}, Reply: llmsim.Reply{ToolCalls: []llmsim.ToolCall{{Name: "forecast", Arguments: `{"city":"Oslo"}`}}}},
	}}})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	t.Setenv("GROQ_BASE_URL", sim.URL()+"/v1")
	t.Setenv("GROQ_API_KEY", "gsk-test")
	t.Setenv("OPENAI_API_KEY", "sk-openai-secret")

	reg := model.NewRegistry()
	for _, p := range openai.Presets {
		reg.Register(p.Name, p.New)
	}
	m, err := reg.Resolve("groq:llama-3.3-70b")
	if err != nil {
		t.Fatal(err)
	}
	req := ask("what is the weather in Oslo?")
	req.Model = "llama-3.3-70b"
	req.Tools = []svc.ToolSpec{{Name: "forecast", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	resp, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "forecast" || string(resp.ToolCalls[0].Arguments) != `{"city":"Oslo"}` {
		t.Errorf("tool calls %+v, want forecast {city: Oslo}", resp.ToolCalls)
	}
	if resp.InputTokens == 0 || resp.OutputTokens == 0 {
		t.Errorf("usage %d in, %d out; want both counted", resp.InputTokens, resp.OutputTokens)
	}
	if n := sim.Stats()["gsk-test/llama-3.3-70b"]; n != 1 {
		t.Errorf("llmsim saw %v, want one call with the Groq key", sim.Stats())
	}

	// A refused call names the preset, not "openai".
	t.Setenv("GROQ_API_KEY", "wrong")
	m, _ = reg.Resolve("groq:llama-3.3-70b")
	_, err = m.Generate(t.Context(), ask("hi"))
	if pe, ok := errors.AsType[*model.ProviderError](err); !ok || pe.Provider != "groq" || pe.Class != model.ClassAuth {
		t.Errorf("a wrong key: %v; want a groq auth ProviderError", err)
	}
}
