package openai_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/openai"
)

// simModel starts llmsim with cfg and returns an openai model pointed at
// it through the real SDK.
func simModel(t *testing.T, cfg llmsim.Config) svc.Model {
	t.Helper()
	sim := llmsim.New(cfg)
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	m, err := openai.NewWithConfig("gpt-4o-mini", openai.Config{BaseURL: sim.URL() + "/v1", APIKey: "sk-test",
		HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func userAsks(text string, settings map[string]any) svc.ModelRequest {
	in, _ := json.Marshal(text)
	return svc.ModelRequest{Model: "gpt-4o-mini", Messages: []svc.Message{{Role: svc.RoleUser, Content: in}}, Settings: settings}
}

// A streamed call hands its text over fragment by fragment, as llmsim
// sends it, and answers what the plain call answers: the same output and
// the same usage (from the stream's last chunk).
func TestStreamMatchesPlainCall(t *testing.T) {
	m := simModel(t, llmsim.Config{TokensPerSecond: 2000})
	ctx := t.Context()
	prompt := "the quick brown fox jumps over the lazy dog, twice over"
	plain, err := m.Generate(ctx, userAsks(prompt, nil))
	if err != nil {
		t.Fatal(err)
	}
	var frags []string
	req := userAsks(prompt, map[string]any{"stream": true})
	req.OnDelta = func(s string) { frags = append(frags, s) }
	streamed, err := m.Generate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if len(frags) < 2 {
		t.Fatalf("%d fragments (%q): the answer did not stream", len(frags), frags)
	}
	if got, want := `"`+strings.Join(frags, "")+`"`, string(plain.Output); got != want {
		t.Errorf("fragments join to %s, the plain answer is %s", got, want)
	}
	if string(streamed.Output) != string(plain.Output) {
		t.Errorf("streamed output %s, plain %s", streamed.Output, plain.Output)
	}
	if streamed.InputTokens == 0 || streamed.InputTokens != plain.InputTokens || streamed.OutputTokens != plain.OutputTokens {
		t.Errorf("streamed usage %d in / %d out, plain %d / %d", streamed.InputTokens, streamed.OutputTokens, plain.InputTokens, plain.OutputTokens)
	}
}

// A streamed tool call's arguments arrive in fragments and are assembled
// into the call the plain answer has.
func TestStreamAssemblesToolCalls(t *testing.T) {
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{{Match: llmsim.Match{Contains: "weather"},
		Reply: llmsim.Reply{ToolCalls: []llmsim.ToolCall{{Name: "get_weather", Arguments: `{"city":"Paris","unit":"celsius","days":3}`}}}}}}
	m := simModel(t, llmsim.Config{Scenario: sc, TokensPerSecond: 5000})
	req := userAsks("what is the weather in Paris", nil)
	req.Tools = []svc.ToolSpec{{Name: "get_weather", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	deltas := 0
	req.OnDelta = func(string) { deltas++ }
	resp, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "get_weather" {
		t.Fatalf("tool calls %+v", resp.ToolCalls)
	}
	var args map[string]any
	if err := json.Unmarshal(resp.ToolCalls[0].Arguments, &args); err != nil || args["city"] != "Paris" || args["days"] != float64(3) {
		t.Errorf("arguments %s (%v), want the scripted object", resp.ToolCalls[0].Arguments, err)
	}
	if deltas != 0 {
		t.Errorf("%d text deltas for an answer of tool calls only", deltas)
	}
}

// A stream that stops sending past stream_idle_timeout_ms fails as a
// timeout (a ProviderError of ClassTimeout, which retries and fallbacks
// treat as any timeout), after the fragments that did arrive; it does not
// hang.
func TestStreamIdleTimeout(t *testing.T) {
	sc := &llmsim.Scenario{Rules: []llmsim.Rule{{StallAfterTokens: 3}}}
	m := simModel(t, llmsim.Config{Scenario: sc})
	var frags []string
	req := userAsks("one two three four five six seven eight", map[string]any{"stream_idle_timeout_ms": 200, "max_retries": 0})
	req.OnDelta = func(s string) { frags = append(frags, s) }
	start := time.Now()
	_, err := m.Generate(t.Context(), req)
	var pe *model.ProviderError
	if !errors.As(err, &pe) || pe.Class != model.ClassTimeout {
		t.Fatalf("a stalled stream: %v, want a ProviderError of ClassTimeout", err)
	}
	if !strings.Contains(err.Error(), "stream_idle_timeout_ms") {
		t.Errorf("the error does not say which setting: %v", err)
	}
	if len(frags) == 0 {
		t.Error("no fragment arrived before the stall")
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the stalled call took %v", took)
	}
}

// A malformed chunk mid-stream and a connection reset are classified
// failures, never a panic or a half answer.
func TestStreamFaults(t *testing.T) {
	for _, c := range []struct {
		fault string
		class model.Class
	}{{"malformed", model.ClassServer}, {"reset", model.ClassTimeout}, {"500", model.ClassServer}} {
		t.Run(c.fault, func(t *testing.T) {
			sc := &llmsim.Scenario{Rules: []llmsim.Rule{{Fault: c.fault}}}
			m := simModel(t, llmsim.Config{Scenario: sc})
			req := userAsks("hello there", map[string]any{"max_retries": 0})
			req.OnDelta = func(string) {}
			resp, err := m.Generate(t.Context(), req)
			var pe *model.ProviderError
			if !errors.As(err, &pe) || pe.Class != c.class {
				t.Fatalf("fault %s: %+v, %v; want a ProviderError of class %s", c.fault, resp, err, c.class)
			}
		})
	}
}

// The settings a streaming agent writes are accepted: stream (read by the
// runtime) and stream_idle_timeout_ms; a bad value is refused before any
// request.
func TestStreamSettings(t *testing.T) {
	m := simModel(t, llmsim.Config{})
	for _, bad := range []map[string]any{{"stream": "yes"}, {"stream_idle_timeout_ms": -5}, {"stream_idle_timeout_ms": "soon"}, {"stream_options": map[string]any{}}} {
		if _, err := m.Generate(t.Context(), userAsks("hi", bad)); !errors.Is(err, svc.ErrSpecValidation) {
			t.Errorf("settings %v: %v, want a SpecValidationError", bad, err)
		}
	}
	if _, err := m.Generate(t.Context(), userAsks("hi", map[string]any{"stream": false, "stream_idle_timeout_ms": 1000, "prompt_cache": true, "stream_interval_ms": 5})); err != nil {
		t.Errorf("streaming settings refused: %v", err)
	}
}

// OpenAI caches a repeated prompt prefix of 1,024 tokens or more by
// itself; the cached part of the prompt is read from usage
// (prompt_tokens_details.cached_tokens) into CachedInputTokens, plain and
// streamed.
func TestCachedTokens(t *testing.T) {
	m := simModel(t, llmsim.Config{})
	long := strings.Repeat("a long and stable system prompt, ", 200) // about 1,650 tokens
	ask := func(stream bool) svc.ModelResponse {
		req := userAsks("hello", nil)
		req.Instructions = long
		if stream {
			req.OnDelta = func(string) {}
		}
		resp, err := m.Generate(t.Context(), req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	if first := ask(false); first.CachedInputTokens != 0 {
		t.Errorf("the first call read %d tokens from the cache", first.CachedInputTokens)
	}
	for _, stream := range []bool{false, true} {
		if r := ask(stream); r.CachedInputTokens < 1024 || r.CachedInputTokens > r.InputTokens {
			t.Errorf("a repeated prefix (stream %v): %d cached of %d input tokens", stream, r.CachedInputTokens, r.InputTokens)
		}
	}
}
