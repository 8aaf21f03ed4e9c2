package anthropic_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/anthropic"
)

// simModel starts llmsim with cfg and returns an anthropic model pointed
// at it through the real SDK, without retries.
func simModel(t *testing.T, cfg llmsim.Config) svc.Model {
	t.Helper()
	sim := llmsim.New(cfg)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	m, err := anthropic.NewWithConfig("claude-haiku-4-5", anthropic.Config{BaseURL: sim.URL(), APIKey: "sk-test", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func userAsks(text string, settings map[string]any) svc.ModelRequest {
	in, _ := json.Marshal(text)
	return svc.ModelRequest{Model: "claude-haiku-4-5", Messages: []svc.Message{{Role: svc.RoleUser, Content: in}}, Settings: settings}
}

// A streamed call hands its text over fragment by fragment and answers
// what the plain call answers, usage included.
func TestStreamMatchesPlainCall(t *testing.T) {
	m := simModel(t, llmsim.Config{TokensPerSecond: 2000})
	prompt := "the quick brown fox jumps over the lazy dog, twice over"
	plain, err := m.Generate(t.Context(), userAsks(prompt, nil))
	if err != nil {
		t.Fatal(err)
	}
	var frags []string
	req := userAsks(prompt, map[string]any{"stream": true})
	req.OnDelta = func(s string) { frags = append(frags, s) }
	streamed, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(frags) < 2 {
		t.Fatalf("%d fragments (%q): the answer did not stream", len(frags), frags)
	}
	if got, want := `"`+strings.Join(frags, "")+`"`, string(plain.Output); got != want {
		t.Errorf("fragments join to %s, the plain answer is %s", got, want)
	}
	if string(streamed.Output) != string(plain.Output) || streamed.InputTokens == 0 ||
		streamed.InputTokens != plain.InputTokens || streamed.OutputTokens != plain.OutputTokens {
		t.Errorf("streamed %s (%d in, %d out), plain %s (%d in, %d out)", streamed.Output, streamed.InputTokens, streamed.OutputTokens,
			plain.Output, plain.InputTokens, plain.OutputTokens)
	}
}

// A streamed tool_use block's input arrives as input_json_delta fragments
// and is assembled into the call.
func TestStreamAssemblesToolCalls(t *testing.T) {
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{{Match: llmsim.Match{Contains: "weather"},
		Reply: llmsim.Reply{ToolCalls: []llmsim.ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris","days":3}`}}}}}}
	m := simModel(t, llmsim.Config{Scenario: sc, TokensPerSecond: 5000})
	req := userAsks("what is the weather in Paris", nil)
	req.Tools = []svc.ToolSpec{{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	req.OnDelta = func(string) {}
	resp, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var args map[string]any
	if len(resp.ToolCalls) != 1 || json.Unmarshal(resp.ToolCalls[0].Arguments, &args) != nil || args["city"] != "Paris" || args["days"] != float64(3) {
		t.Fatalf("tool calls %+v, want get_weather with the scripted input", resp.ToolCalls)
	}
}

// A stalled stream fails as a timeout after stream_idle_timeout_ms; a
// malformed event and a server error are classified failures.
func TestStreamFaults(t *testing.T) {
	t.Run("stall", func(t *testing.T) {
		m := simModel(t, llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{{StallAfterTokens: 3}}}})
		req := userAsks("one two three four five six seven eight", map[string]any{"stream_idle_timeout_ms": 200})
		n := 0
		req.OnDelta = func(string) { n++ }
		_, err := m.Generate(t.Context(), req)
		var pe *model.ProviderError
		if !errors.As(err, &pe) || pe.Class != model.ClassTimeout || !strings.Contains(err.Error(), "stream_idle_timeout_ms") {
			t.Fatalf("a stalled stream: %v, want a timeout naming stream_idle_timeout_ms", err)
		}
		if n == 0 {
			t.Error("no fragment before the stall")
		}
	})
	for _, fault := range []string{"malformed", "500", "529"} {
		t.Run(fault, func(t *testing.T) {
			m := simModel(t, llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{{Fault: fault}}}})
			req := userAsks("hello there", nil)
			req.OnDelta = func(string) {}
			_, err := m.Generate(t.Context(), req)
			var pe *model.ProviderError
			if !errors.As(err, &pe) || pe.Class == "" {
				t.Fatalf("fault %s: %v, want a classified ProviderError", fault, err)
			}
		})
	}
}

// With prompt_cache, the instructions and tools are marked cacheable: a
// second call with the same prefix reads it from the cache, and the
// cached tokens are reported (CachedInputTokens, counted in InputTokens
// too), plain and streamed; without it, nothing is cached.
func TestPromptCache(t *testing.T) {
	m := simModel(t, llmsim.Config{})
	instructions := strings.Repeat("You are a careful assistant who answers briefly. ", 200)
	ask := func(settings map[string]any, stream bool) svc.ModelResponse {
		req := userAsks("hello", settings)
		req.Instructions = instructions
		req.Tools = []svc.ToolSpec{{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`)}}
		if stream {
			req.OnDelta = func(string) {}
		}
		resp, err := m.Generate(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if r := ask(nil, false); r.CachedInputTokens != 0 {
		t.Errorf("without prompt_cache: %d cached tokens", r.CachedInputTokens)
	}
	if r := ask(nil, false); r.CachedInputTokens != 0 {
		t.Errorf("without prompt_cache, twice: %d cached tokens", r.CachedInputTokens)
	}
	cache := map[string]any{"prompt_cache": true}
	first := ask(cache, false)
	if first.CachedInputTokens != 0 {
		t.Errorf("the first cached call read %d tokens from the cache", first.CachedInputTokens)
	}
	for _, stream := range []bool{false, true} {
		r := ask(cache, stream)
		if r.CachedInputTokens == 0 || r.CachedInputTokens > r.InputTokens || r.InputTokens != first.InputTokens {
			t.Errorf("a repeated prefix (stream %v): %d cached of %d input tokens (first call %d)", stream, r.CachedInputTokens, r.InputTokens, first.InputTokens)
		}
	}
}

// Without instructions, prompt_cache still caches the tool definitions:
// the last tool carries the cache mark.
func TestPromptCacheToolsOnly(t *testing.T) {
	m := simModel(t, llmsim.Config{})
	req := userAsks("hello", map[string]any{"prompt_cache": true})
	req.Tools = []svc.ToolSpec{
		{Name: "lookup", Description: strings.Repeat("Looks things up in the big book. ", 100), InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: "write", Description: "Writes a page.", InputSchema: json.RawMessage(`{"type":"object"}`)},
	}
	first, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	second, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if first.CachedInputTokens != 0 || second.CachedInputTokens < 500 || second.CachedInputTokens > second.InputTokens {
		t.Errorf("tools only: cached %d, then %d of %d input tokens", first.CachedInputTokens, second.CachedInputTokens, second.InputTokens)
	}
}
