package google_test

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
	"time"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/google"
)

// fake is a Gemini API server that records each request and answers
// with the n-th of its answers.
type fake struct {
	srv     *httptest.Server
	mu      sync.Mutex
	paths   []string
	headers []http.Header
	bodies  []map[string]any
}

func newFake(t *testing.T, answers ...string) *fake {
	t.Helper()
	f := &fake{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		f.mu.Lock()
		n := len(f.bodies)
		f.paths, f.headers, f.bodies = append(f.paths, r.URL.Path), append(f.headers, r.Header.Clone()), append(f.bodies, body)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, answers[min(n, len(answers)-1)])
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// A tool loop as Gemini sees it: the request carries the system
// instruction, the function declarations with their JSON schemas, the
// settings in generationConfig and the key in x-goog-api-key; the call
// comes back with a made-up id, and the next turn sends the call (with
// its thought signature, which thinking models require) and its result as
// a functionResponse of the function's name.
func TestToolLoopOnTheWire(t *testing.T) {
	f := newFake(t,
		`{"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"lookup","args":{"word":"svc"}},"thoughtSignature":"c2lnbmVk"}]},"finishReason":"STOP"}],
		  "usageMetadata":{"promptTokenCount":20,"candidatesTokenCount":5,"thoughtsTokenCount":7,"cachedContentTokenCount":8,"totalTokenCount":32}}`,
		`{"candidates":[{"content":{"role":"model","parts":[{"text":"a service"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":2,"totalTokenCount":32}}`)
	m, err := google.NewWithConfig("gemini-2.5-flash", google.Config{BaseURL: f.srv.URL, APIKey: "g-key"})
	if err != nil {
		t.Fatal(err)
	}
	req := svc.ModelRequest{
		Instructions: "Be brief.",
		Messages:     []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"what is svc?"`)}},
		Tools: []svc.ToolSpec{{Name: "lookup", Description: "Looks a word up.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`)}},
		Settings: map[string]any{"temperature": 0.5, "max_tokens": 100, "stop": "END", "thinking_budget": 0, "reasoning_effort": "low"},
	}
	resp, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "lookup" || string(resp.ToolCalls[0].Arguments) != `{"word":"svc"}` || resp.ToolCalls[0].ID == "" {
		t.Fatalf("tool calls %+v; want lookup {word: svc} with an id", resp.ToolCalls)
	}
	if resp.InputTokens != 20 || resp.OutputTokens != 12 || resp.CachedInputTokens != 8 || resp.Tokens() != 32 {
		t.Errorf("usage in %d out %d cached %d total %d; want 20, 5+7 thinking, 8, 32", resp.InputTokens, resp.OutputTokens, resp.CachedInputTokens, resp.Tokens())
	}
	b := f.bodies[0]
	if f.paths[0] != "/v1beta/models/gemini-2.5-flash:generateContent" || f.headers[0].Get("x-goog-api-key") != "g-key" {
		t.Errorf("called %s with key %q", f.paths[0], f.headers[0].Get("x-goog-api-key"))
	}
	if get(b, "systemInstruction", "parts", 0, "text") != "Be brief." {
		t.Errorf("system instruction %v", get(b, "systemInstruction"))
	}
	decl := get(b, "tools", 0, "functionDeclarations", 0)
	if get(decl, "name") != "lookup" || get(decl, "parametersJsonSchema", "required", 0) != "word" {
		t.Errorf("function declaration %v", decl)
	}
	gc := get(b, "generationConfig")
	if get(gc, "temperature") != 0.5 || get(gc, "maxOutputTokens") != 100.0 || get(gc, "stopSequences", 0) != "END" ||
		get(gc, "thinkingConfig", "thinkingBudget") != 0.0 || get(gc, "reasoning_effort") != nil || get(b, "reasoning_effort") != nil {
		t.Errorf("generationConfig %v; want temperature, maxOutputTokens, stopSequences, thinkingBudget and no other provider's keys", gc)
	}

	call := resp.ToolCalls[0]
	req.Messages = append(req.Messages,
		svc.Message{Role: svc.RoleAssistant, ToolCalls: []svc.ToolCall{call}},
		svc.Message{Role: svc.RoleTool, ToolCallID: call.ID, Content: json.RawMessage(`{"meaning":"a service"}`)})
	resp, err = m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `"a service"` {
		t.Errorf("output %s", resp.Output)
	}
	b = f.bodies[1]
	fc := get(b, "contents", 1, "parts", 0)
	if get(b, "contents", 1, "role") != "model" || get(fc, "functionCall", "name") != "lookup" || get(fc, "thoughtSignature") != "c2lnbmVk" {
		t.Errorf("the call sent back: %v; want lookup with its thought signature", fc)
	}
	if id := get(fc, "functionCall", "id"); id != nil {
		t.Errorf("a made-up id was sent back: %v", id)
	}
	fr := get(b, "contents", 2, "parts", 0, "functionResponse")
	if get(b, "contents", 2, "role") != "user" || get(fr, "name") != "lookup" || get(fr, "response", "result", "meaning") != "a service" {
		t.Errorf("the tool result sent: %v; want a functionResponse of lookup with {result: ...}", get(b, "contents", 2))
	}
}

// With an output schema and no tools the request asks for JSON, and the
// answer is the JSON value.
func TestStructuredOutput(t *testing.T) {
	f := newFake(t, `{"candidates":[{"content":{"role":"model","parts":[{"text":"{\"category\": \"billing\"}"}]},"finishReason":"STOP"}]}`)
	m, _ := google.NewWithConfig("gemini-2.5-flash", google.Config{BaseURL: f.srv.URL, APIKey: "g-key"})
	resp, err := m.Generate(t.Context(), svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"x"`)}},
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"category":{"type":"string"}}}`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `{"category":"billing"}` {
		t.Errorf("output %s; want the JSON object", resp.Output)
	}
	gc := get(f.bodies[0], "generationConfig")
	if get(gc, "responseMimeType") != "application/json" || get(gc, "responseJsonSchema", "type") != "object" {
		t.Errorf("generationConfig %v; want JSON with the schema", gc)
	}
}

// Streaming through the SDK against llmsim: the fragments arrive in
// order and make the answer; tool calls and usage come from the chunks.
func TestStreamThroughSDK(t *testing.T) {
	sim := start(t, llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Contains: "weather"}, Reply: llmsim.Reply{Text: "Let me look.", ToolCalls: []llmsim.ToolCall{{Name: "forecast", Arguments: `{"city":"Oslo"}`}}}},
	}}})
	m := newModel(t, sim, "gemini-2.5-flash")
	var deltas []string
	ask := func(text string) (svc.ModelResponse, error) {
		deltas = nil
		b, _ := json.Marshal(text)
		return m.Generate(t.Context(), svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: b}},
			Tools:   []svc.ToolSpec{{Name: "forecast", InputSchema: json.RawMessage(`{"type":"object"}`)}},
			OnDelta: func(s string) { deltas = append(deltas, s) }})
	}
	resp, err := ask("hello there, streaming world")
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `"hello there, streaming world"` || strings.Join(deltas, "") != "hello there, streaming world" || len(deltas) < 3 {
		t.Errorf("output %s from %q", resp.Output, deltas)
	}
	if resp.InputTokens == 0 || resp.OutputTokens == 0 {
		t.Errorf("usage %d/%d; want the last chunk's", resp.InputTokens, resp.OutputTokens)
	}
	resp, err = ask("what is the weather?")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "forecast" || string(resp.ToolCalls[0].Arguments) != `{"city":"Oslo"}` {
		t.Errorf("streamed tool calls %+v", resp.ToolCalls)
	}

	// A stream that stops sending fails with a timeout after its idle
	// limit, not never.
	sim2 := start(t, llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{{StallAfterTokens: 2}}}})
	m2 := newModel(t, sim2, "gemini-2.5-flash")
	_, err = m2.Generate(t.Context(), svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"a long enough answer to stall"`)}},
		Settings: map[string]any{"stream_idle_timeout_ms": 200}, OnDelta: func(string) {}})
	if pe, ok := errors.AsType[*model.ProviderError](err); !ok || pe.Class != model.ClassTimeout {
		t.Errorf("a stalled stream: %v; want a timeout", err)
	}
}

// Gemini's own error shapes: a wrong key is a 400 with reason
// API_KEY_INVALID (auth, no fallback); a 429's RetryInfo is the wait
// asked for; no key at all fails before any request.
func TestErrorsThroughSDK(t *testing.T) {
	sim := start(t, llmsim.Config{Keys: []string{"right"}})
	m, _ := google.NewWithConfig("gemini-2.5-flash", google.Config{BaseURL: sim.URL(), APIKey: "wrong", MaxRetries: -1})
	_, err := m.Generate(t.Context(), svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"x"`)}}})
	pe, ok := errors.AsType[*model.ProviderError](err)
	if !ok || pe.Class != model.ClassAuth || pe.Status != 400 || pe.Fallback() || !strings.Contains(pe.Message, "API key not valid") {
		t.Errorf("a wrong key: %v; want a 400 auth error", err)
	}

	sim = start(t, llmsim.Config{RPM: 1})
	m, _ = google.NewWithConfig("gemini-2.5-flash", google.Config{BaseURL: sim.URL(), APIKey: "k", MaxRetries: -1})
	ask := svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"x"`)}}}
	if _, err := m.Generate(t.Context(), ask); err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(t.Context(), ask)
	pe, ok = errors.AsType[*model.ProviderError](err)
	if !ok || pe.Class != model.ClassRateLimit || pe.RetryAfter < 10*time.Second || pe.RateLimit == nil || pe.RateLimit.RetryAfter != pe.RetryAfter {
		t.Errorf("over the rate limit: %v (retry after %v); want a 429 asking to wait about a minute", err, pe.RetryAfter)
	}

	t.Setenv("GEMINI_API_KEY", "")
	t.Setenv("GOOGLE_API_KEY", "")
	m, _ = google.New("gemini-2.5-flash")
	_, err = m.Generate(t.Context(), ask)
	if pe, ok := errors.AsType[*model.ProviderError](err); !ok || pe.Class != model.ClassAuth || !strings.Contains(pe.Message, "GEMINI_API_KEY") {
		t.Errorf("no key: %v", err)
	}
}

// What svc validate asks before any call: each bad key of the provider's
// is reported (with its reason), other providers' keys pass.
func TestCheckSettings(t *testing.T) {
	m, _ := google.NewWithConfig("gemini-2.5-flash", google.Config{APIKey: "k"})
	sc := m.(interface {
		CheckSettings(map[string]any, []string, bool) error
	})
	err := sc.CheckSettings(map[string]any{"temperature": "hot", "max_tokens": 1.5, "reasoning_effort": "low", "top_k": 40}, nil, false)
	if err == nil || !strings.Contains(err.Error(), "model_settings.temperature: want a number") ||
		!strings.Contains(err.Error(), "model_settings.max_tokens: want a positive integer") || strings.Contains(err.Error(), "top_k") ||
		strings.Contains(err.Error(), "reasoning_effort") {
		t.Errorf("CheckSettings: %v", err)
	}
	if err := sc.CheckSettings(map[string]any{"temperature": 0.3, "thinking_budget": -1}, nil, false); err != nil {
		t.Errorf("good settings: %v", err)
	}
}

// builtin_tools web_search, web_fetch and code_execution reach the Gemini
// API as grounding with Google Search, URL context and code execution;
// the searches (grounding metadata), the pages read and the code run come
// back beside the answer, which is the model's text without the code.
func TestServerToolsOnTheWire(t *testing.T) {
	f := newFake(t, `{"candidates":[{"content":{"role":"model","parts":[
			{"executableCode":{"language":"PYTHON","code":"print(6*7)"}},
			{"codeExecutionResult":{"outcome":"OUTCOME_OK","output":"42\n"}},
			{"text":"It is 42, says example.com."}]},
		  "finishReason":"STOP",
		  "groundingMetadata":{"webSearchQueries":["answer to everything"],"groundingChunks":[{"web":{"uri":"https://example.com","title":"example.com"}}]},
		  "urlContextMetadata":{"urlMetadata":[{"retrievedUrl":"https://example.com/a","urlRetrievalStatus":"URL_RETRIEVAL_STATUS_SUCCESS"}]}}],
		 "usageMetadata":{"promptTokenCount":30,"candidatesTokenCount":10,"toolUsePromptTokenCount":100,"totalTokenCount":140}}`)
	m, _ := google.NewWithConfig("gemini-2.5-flash", google.Config{BaseURL: f.srv.URL, APIKey: "g-key"})
	if got := m.(model.ServerToolModel).ServerTools(); strings.Join(got, ",") != "web_search,web_fetch,code_execution" {
		t.Errorf("ServerTools() = %v", got)
	}
	resp, err := m.Generate(t.Context(), svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"what is the answer?"`)}},
		OutputSchema: json.RawMessage(`{"type":"string"}`),
		ServerTools:  []string{"web_search", "web_fetch", "code_execution"}})
	if err != nil {
		t.Fatal(err)
	}
	tools := fmt.Sprint(get(f.bodies[0], "tools"))
	for _, want := range []string{"googleSearch", "urlContext", "codeExecution"} {
		if !strings.Contains(tools, want) {
			t.Errorf("tools sent %s; want %s", tools, want)
		}
	}
	if get(f.bodies[0], "generationConfig", "responseMimeType") != nil {
		t.Error("a JSON answer was asked for beside server tools, which Gemini refuses")
	}
	if string(resp.Output) != `"It is 42, says example.com."` {
		t.Errorf("output %s", resp.Output)
	}
	var names []string
	for _, u := range resp.ServerToolUses {
		names = append(names, u.Name)
	}
	if strings.Join(names, ",") != "web_search,web_fetch,code_execution" {
		t.Fatalf("server tool uses %v", names)
	}
	search, code := resp.ServerToolUses[0], resp.ServerToolUses[2]
	if string(search.Input) != `{"queries":["answer to everything"]}` || !strings.Contains(string(search.Result), "https://example.com") {
		t.Errorf("search %s -> %s", search.Input, search.Result)
	}
	if !strings.Contains(string(code.Input), "print(6*7)") || !strings.Contains(string(code.Result), `"output":"42\n"`) {
		t.Errorf("code %s -> %s", code.Input, code.Result)
	}
	if !strings.Contains(string(resp.ServerToolUses[1].Result), "https://example.com/a") {
		t.Errorf("url context %s", resp.ServerToolUses[1].Result)
	}
}
