package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"go.uber.org/goleak"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// fakeAPI is a Messages API on 127.0.0.1 that records what it is sent and
// answers with handle.
type fakeAPI struct {
	srv    *httptest.Server
	client *http.Client
	mu     sync.Mutex
	reqs   []recorded
	handle func(w http.ResponseWriter, r *http.Request, n int)
}

type recorded struct {
	path   string
	header http.Header
	body   map[string]any
}

func newFake(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *fakeAPI {
	t.Helper()
	f := &fakeAPI{handle: handle}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("request body is not a JSON object: %v: %s", err, raw)
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{path: r.URL.Path, header: r.Header.Clone(), body: body})
		n := len(f.reqs)
		f.mu.Unlock()
		f.handle(w, r, n)
	}))
	tr := &http.Transport{}
	f.client = &http.Client{Transport: tr}
	t.Cleanup(func() {
		f.srv.Close()
		tr.CloseIdleConnections()
	})
	return f
}

func (f *fakeAPI) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// model returns a model talking to f with key sk-test, with tiny retry
// waits left to the server's headers.
func (f *fakeAPI) model(t *testing.T, cfg Config) svc.Model {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = "sk-test"
	}
	cfg.BaseURL = f.srv.URL
	cfg.HTTPClient = f.client
	m, err := NewWithConfig("claude-test", cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// reply writes a Messages API answer with the given content blocks.
func reply(w http.ResponseWriter, content string, usage string) {
	if usage == "" {
		usage = `{"input_tokens":10,"output_tokens":5}`
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":"msg_1","type":"message","role":"assistant","model":"claude-test",`+
		`"content":%s,"stop_reason":"end_turn","stop_sequence":null,"usage":%s}`, content, usage)
}

func apiError(w http.ResponseWriter, status int, typ, msg string, headers ...string) {
	for i := 0; i+1 < len(headers); i += 2 {
		w.Header().Set(headers[i], headers[i+1])
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"type":"error","error":{"type":%q,"message":%q}}`, typ, msg)
}

func textReply(text string) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, _ *http.Request, _ int) {
		b, _ := json.Marshal(text)
		reply(w, `[{"type":"text","text":`+string(b)+`}]`, "")
	}
}

// assertJSON fails unless got, marshalled, is the JSON value want.
func assertJSON(t *testing.T, what string, got any, want string) {
	t.Helper()
	raw, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(raw, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad want: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("%s:\n got %s\nwant %s", what, raw, want)
	}
}

func providerError(t *testing.T, err error) *model.ProviderError {
	t.Helper()
	var pe *model.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("want a *model.ProviderError, got %T: %v", err, err)
	}
	return pe
}

func userText(s string) []svc.Message {
	b, _ := json.Marshal(s)
	return []svc.Message{{Role: svc.RoleUser, Content: b}}
}

func TestRequestBodyAndToolCalls(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		reply(w, `[{"type":"text","text":"Checking Lyon."},`+
			`{"type":"tool_use","id":"toolu_3","name":"weather","input":{"city":"Lyon"}}]`,
			`{"input_tokens":100,"output_tokens":20,"cache_read_input_tokens":30,"cache_creation_input_tokens":5}`)
	})
	m := f.model(t, Config{})
	req := svc.ModelRequest{
		Model:        "claude-test",
		Instructions: "Be brief.",
		Messages: []svc.Message{
			{Role: svc.RoleUser, Content: json.RawMessage(`{"city":"Paris"}`)},
			{Role: svc.RoleAssistant, Content: json.RawMessage(`"Let me check."`), ToolCalls: []svc.ToolCall{
				{ID: "toolu_1", Name: "weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
				{ID: "toolu_2", Name: "clock"},
			}},
			{Role: svc.RoleTool, ToolCallID: "toolu_1", Content: json.RawMessage(`{"temp":21}`)},
			{Role: svc.RoleTool, ToolCallID: "toolu_2", Content: json.RawMessage(`"clock is broken"`), IsError: true},
		},
		Tools: []svc.ToolSpec{
			{Name: "weather", Description: "Weather for a city", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`)},
			{Name: "clock", InputSchema: json.RawMessage(`{"properties":{}}`)},
		},
		Settings: map[string]any{
			"max_tokens":   512, // an int, as YAML decodes it
			"temperature":  0.2,
			"top_p":        json.Number("0.9"),
			"top_k":        float64(40), // a float, as JSON decodes it
			"stop":         "END",
			"seed":         7,
			"service_tier": "auto",
			"metadata":     map[string]any{"user_id": "u-1"},
		},
	}
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}

	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.path != "/v1/messages" {
		t.Errorf("path %q", r.path)
	}
	if got := r.header.Get("X-Api-Key"); got != "sk-test" {
		t.Errorf("x-api-key %q", got)
	}
	if got := r.header.Get("Anthropic-Version"); got != "2023-06-01" {
		t.Errorf("anthropic-version %q", got)
	}
	assertJSON(t, "request body", r.body, `{
		"model": "claude-test",
		"max_tokens": 512,
		"system": [{"type": "text", "text": "Be brief."}],
		"temperature": 0.2,
		"top_p": 0.9,
		"top_k": 40,
		"stop_sequences": ["END"],
		"service_tier": "auto",
		"metadata": {"user_id": "u-1"},
		"messages": [
			{"role": "user", "content": [{"type": "text", "text": "{\"city\":\"Paris\"}"}]},
			{"role": "assistant", "content": [
				{"type": "text", "text": "Let me check."},
				{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}},
				{"type": "tool_use", "id": "toolu_2", "name": "clock", "input": {}}
			]},
			{"role": "user", "content": [
				{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "{\"temp\":21}"}]},
				{"type": "tool_result", "tool_use_id": "toolu_2", "is_error": true, "content": [{"type": "text", "text": "clock is broken"}]}
			]}
		],
		"tools": [
			{"name": "weather", "description": "Weather for a city",
			 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}},
			{"name": "clock", "input_schema": {"type": "object", "properties": {}}}
		]
	}`)

	if len(resp.ToolCalls) != 1 {
		t.Fatalf("tool calls %+v, want 1", resp.ToolCalls)
	}
	c := resp.ToolCalls[0]
	if c.ID != "toolu_3" || c.Name != "weather" {
		t.Errorf("tool call %+v", c)
	}
	assertJSON(t, "arguments", c.Arguments, `{"city":"Lyon"}`)
	assertJSON(t, "output", resp.Output, `"Checking Lyon."`)
	if resp.InputTokens != 135 || resp.OutputTokens != 20 || resp.Tokens() != 155 {
		t.Errorf("tokens in %d out %d total %d, want 135 (cached included), 20, 155",
			resp.InputTokens, resp.OutputTokens, resp.Tokens())
	}
}

func TestFinalTextAndDefaults(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		reply(w, `[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"Hello, "},{"type":"text","text":"world"}]`,
			`{"input_tokens":12,"output_tokens":3}`)
	})
	m := f.model(t, Config{})
	resp, err := m.Generate(context.Background(), svc.ModelRequest{
		Messages: []svc.Message{
			{Role: svc.RoleUser, Content: json.RawMessage(`null`)},
			{Role: svc.RoleAssistant, Content: json.RawMessage(`""`)}, // empty: dropped
			{Role: svc.RoleUser, Content: json.RawMessage(`"go on"`)},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "output", resp.Output, `"Hello, world"`)
	if len(resp.ToolCalls) != 0 {
		t.Errorf("tool calls %+v", resp.ToolCalls)
	}
	if resp.InputTokens != 12 || resp.OutputTokens != 3 {
		t.Errorf("tokens %d/%d", resp.InputTokens, resp.OutputTokens)
	}
	// The model's own name when the request names none, the default
	// max_tokens, no system prompt, and consecutive user turns merged.
	assertJSON(t, "request body", f.requests()[0].body, `{
		"model": "claude-test",
		"max_tokens": 4096,
		"messages": [{"role": "user", "content": [
			{"type": "text", "text": "null"},
			{"type": "text", "text": "go on"}
		]}]
	}`)
}

func TestTextThatLooksLikeJSONStaysText(t *testing.T) {
	f := newFake(t, textReply(`{"a":1}`))
	resp, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "output", resp.Output, `"{\"a\":1}"`)
}

func TestStopSequencesList(t *testing.T) {
	f := newFake(t, textReply("ok"))
	_, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{
		Messages: userText("hi"),
		Settings: map[string]any{"stop": []any{"A", "B"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "stop_sequences", f.requests()[0].body["stop_sequences"], `["A","B"]`)
}

const personSchema = `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`

func TestStructuredOutputForcedTool(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		reply(w, `[{"type":"tool_use","id":"toolu_9","name":"final_answer","input":{"name":"Ada"}}]`, "")
	})
	resp, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{
		Messages:     userText("who?"),
		OutputSchema: json.RawMessage(personSchema),
	})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "output", resp.Output, `{"name":"Ada"}`)
	if len(resp.ToolCalls) != 0 {
		t.Errorf("the answer tool came back as a tool call: %+v", resp.ToolCalls)
	}
	body := f.requests()[0].body
	assertJSON(t, "tool_choice", body["tool_choice"], `{"type":"tool","name":"final_answer"}`)
	assertJSON(t, "tools", body["tools"], `[{"name":"final_answer","description":`+
		mustJSON(finalAnswerDescription)+`,"input_schema":`+personSchema+`}]`)
}

func TestStructuredOutputWithToolsLetsToolsRunFirst(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			reply(w, `[{"type":"tool_use","id":"toolu_1","name":"lookup","input":{"q":"x"}}]`, "")
			return
		}
		// The answer with a stray call next to it: the answer wins.
		reply(w, `[{"type":"tool_use","id":"toolu_2","name":"lookup","input":{}},`+
			`{"type":"tool_use","id":"toolu_3","name":"final_answer_","input":{"name":"Bo"}}]`, "")
	})
	m := f.model(t, Config{})
	req := svc.ModelRequest{
		Messages:     userText("who?"),
		OutputSchema: json.RawMessage(personSchema),
		Tools: []svc.ToolSpec{
			{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`)},
			// An agent tool that takes the answer tool's name.
			{Name: "final_answer", InputSchema: json.RawMessage(`{"type":"object"}`)},
		},
	}
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "lookup" {
		t.Fatalf("want the lookup call, got %+v (output %s)", resp.ToolCalls, resp.Output)
	}
	body := f.requests()[0].body
	assertJSON(t, "tool_choice", body["tool_choice"], `{"type":"any"}`)
	var names []string
	for _, tl := range body["tools"].([]any) {
		names = append(names, tl.(map[string]any)["name"].(string))
	}
	if strings.Join(names, ",") != "lookup,final_answer,final_answer_" {
		t.Errorf("tools %v", names)
	}

	resp, err = m.Generate(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 0 {
		t.Errorf("calls next to the answer were kept: %+v", resp.ToolCalls)
	}
	assertJSON(t, "output", resp.Output, `{"name":"Bo"}`)
}

func TestStructuredOutputNonObjectSchemaIsWrapped(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		reply(w, `[{"type":"tool_use","id":"toolu_1","name":"final_answer","input":{"value":["a","b"]}}]`, "")
	})
	resp, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{
		Messages:     userText("list"),
		OutputSchema: json.RawMessage(`{"type":"array","items":{"type":"string"}}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "output", resp.Output, `["a","b"]`)
	tools := f.requests()[0].body["tools"].([]any)
	assertJSON(t, "input_schema", tools[0].(map[string]any)["input_schema"], `{"type":"object",
		"properties":{"value":{"type":"array","items":{"type":"string"}}},
		"required":["value"],"additionalProperties":false}`)
}

func TestStructuredOutputNative(t *testing.T) {
	f := newFake(t, textReply(` {"name":"Cy"} `))
	resp, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{
		Messages:     userText("who?"),
		OutputSchema: json.RawMessage(personSchema),
		Settings:     map[string]any{"structured_output": "native", "output_config": map[string]any{"effort": "low"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "output", resp.Output, `{"name":"Cy"}`)
	body := f.requests()[0].body
	if _, ok := body["tools"]; ok {
		t.Errorf("native structured output sent tools: %v", body["tools"])
	}
	if _, ok := body["tool_choice"]; ok {
		t.Errorf("native structured output sent tool_choice")
	}
	assertJSON(t, "output_config", body["output_config"], `{"effort":"low","format":{"type":"json_schema","schema":
		{"type":"object","properties":{"name":{"type":"string"}},"required":["name"],"additionalProperties":false}}}`)
}

func TestSettingsChooseKeyAndBaseURL(t *testing.T) {
	other := newFake(t, textReply("from other"))
	f := newFake(t, textReply("from default"))
	m := f.model(t, Config{APIKey: "sk-config"})
	t.Setenv("SVC_TEST_ANTHROPIC_KEY", "sk-env")

	cases := []struct {
		settings map[string]any
		api      *fakeAPI
		key      string
	}{
		{nil, f, "sk-config"},
		{map[string]any{"api_key_env": "SVC_TEST_ANTHROPIC_KEY"}, f, "sk-env"},
		{map[string]any{"api_key_env": "SVC_TEST_ANTHROPIC_KEY", "api_key": "sk-inline"}, f, "sk-inline"},
		{map[string]any{"base_url": other.srv.URL}, other, "sk-config"},
	}
	for i, c := range cases {
		before := len(c.api.requests())
		if _, err := m.Generate(context.Background(), svc.ModelRequest{Messages: userText("hi"), Settings: c.settings}); err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		reqs := c.api.requests()
		if len(reqs) != before+1 {
			t.Fatalf("case %d: request went elsewhere", i)
		}
		last := reqs[len(reqs)-1]
		if got := last.header.Get("X-Api-Key"); got != c.key {
			t.Errorf("case %d: key %q, want %q", i, got, c.key)
		}
		for _, k := range []string{"api_key", "api_key_env", "base_url"} {
			if _, ok := last.body[k]; ok {
				t.Errorf("case %d: %s was sent in the body", i, k)
			}
		}
	}
}

func TestEnvironmentConfiguresNew(t *testing.T) {
	f := newFake(t, textReply("hi"))
	t.Setenv(EnvAPIKey, "sk-from-env")
	t.Setenv(EnvBaseURL, f.srv.URL)
	t.Cleanup(sharedHTTPClient().CloseIdleConnections)

	reg := model.NewRegistry()
	reg.Register(Provider, New)
	m, err := reg.Resolve("anthropic:claude-haiku-4-5")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := m.Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "output", resp.Output, `"hi"`)
	r := f.requests()[0]
	if r.header.Get("X-Api-Key") != "sk-from-env" || r.body["model"] != "claude-haiku-4-5" {
		t.Errorf("key %q model %v", r.header.Get("X-Api-Key"), r.body["model"])
	}
}

func TestMissingKeyFailsWithoutCalling(t *testing.T) {
	f := newFake(t, textReply("hi"))
	t.Setenv(EnvAPIKey, "")
	t.Setenv(EnvAuthToken, "")
	m, err := NewWithConfig("claude-test", Config{BaseURL: f.srv.URL, HTTPClient: f.client})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	if pe := providerError(t, err); pe.Class != model.ClassAuth {
		t.Errorf("class %s", pe.Class)
	}
	_, err = m.Generate(context.Background(), svc.ModelRequest{Messages: userText("hi"),
		Settings: map[string]any{"api_key_env": "SVC_TEST_UNSET_VARIABLE"}})
	if pe := providerError(t, err); pe.Class != model.ClassAuth || !strings.Contains(pe.Message, "SVC_TEST_UNSET_VARIABLE") {
		t.Errorf("%v", pe)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("%d requests without a key", n)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(""); svc.KindOf(err) != svc.KindRegistry {
		t.Errorf("empty name: %v", err)
	}
	if _, err := NewWithConfig("x", Config{BaseURL: "ftp://example.com"}); svc.KindOf(err) != svc.KindSpecValidation {
		t.Errorf("bad base URL: %v", err)
	}
}

func TestInvalidRequestIsNotRetried(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens: must be positive")
	})
	_, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	pe := providerError(t, err)
	if pe.Class != model.ClassInvalid || pe.Status != 400 || pe.Fallback() {
		t.Errorf("got %+v", pe)
	}
	if pe.Message != "invalid_request_error: max_tokens: must be positive" {
		t.Errorf("message %q", pe.Message)
	}
	var ae *anthropic.Error
	if !errors.As(err, &ae) || ae.StatusCode != 400 {
		t.Errorf("the SDK's error is not reachable: %v", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1 (no retry)", n)
	}
}

func TestRateLimitIsRetriedAfterRetryAfter(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n <= 2 {
			apiError(w, http.StatusTooManyRequests, "rate_limit_error", "slow down", "Retry-After", "0")
			return
		}
		textReply("done")(w, r, n)
	})
	resp, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	if err != nil {
		t.Fatal(err)
	}
	assertJSON(t, "output", resp.Output, `"done"`)
	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	// Every attempt is the same request.
	for _, r := range reqs[1:] {
		if !reflect.DeepEqual(r.body, reqs[0].body) {
			t.Errorf("a retry sent a different body: %v", r.body)
		}
	}
}

func TestOverloadedAfterRetries(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		apiError(w, 529, "overloaded_error", "Overloaded", "Retry-After-Ms", "1")
	})
	_, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	pe := providerError(t, err)
	if pe.Class != model.ClassOverloaded || pe.Status != 529 || !pe.Fallback() {
		t.Errorf("got %+v", pe)
	}
	if pe.Message != "overloaded_error: Overloaded" || pe.RetryAfter != time.Millisecond {
		t.Errorf("message %q retry after %v", pe.Message, pe.RetryAfter)
	}
	if n := len(f.requests()); n != 1+DefaultMaxRetries {
		t.Errorf("%d requests, want %d", n, 1+DefaultMaxRetries)
	}
}

func TestMaxRetries(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		apiError(w, http.StatusInternalServerError, "api_error", "boom", "Retry-After-Ms", "0")
	})
	_, err := f.model(t, Config{MaxRetries: 4}).Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	if pe := providerError(t, err); pe.Class != model.ClassServer {
		t.Errorf("got %+v", pe)
	}
	if n := len(f.requests()); n != 5 {
		t.Errorf("%d requests, want 5", n)
	}

	g := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		apiError(w, http.StatusInternalServerError, "api_error", "boom", "Retry-After-Ms", "0")
	})
	_, _ = g.model(t, Config{MaxRetries: -1}).Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	if n := len(g.requests()); n != 1 {
		t.Errorf("%d requests with retries off, want 1", n)
	}
}

func TestLongRetryAfterIsNotWaitedOut(t *testing.T) {
	// Beyond MaxRetryWait: fail at once, with the wait the server asked.
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		apiError(w, http.StatusTooManyRequests, "rate_limit_error", "slow down", "Retry-After", "1")
	})
	_, err := f.model(t, Config{MaxRetryWait: time.Millisecond}).Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	pe := providerError(t, err)
	if pe.Class != model.ClassRateLimit || pe.RetryAfter != time.Second {
		t.Errorf("got %+v", pe)
	}
	if n := len(f.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}

	// Past the context's deadline: the same.
	g := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		apiError(w, http.StatusTooManyRequests, "rate_limit_error", "slow down", "Retry-After", "3600")
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = g.model(t, Config{MaxRetryWait: 2 * time.Hour}).Generate(ctx, svc.ModelRequest{Messages: userText("hi")})
	if pe := providerError(t, err); pe.Class != model.ClassRateLimit || pe.RetryAfter != time.Hour {
		t.Errorf("got %+v", pe)
	}
	if n := len(g.requests()); n != 1 {
		t.Errorf("%d requests, want 1", n)
	}
}

func TestDeadlineIsATimeout(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		<-r.Context().Done()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := f.model(t, Config{}).Generate(ctx, svc.ModelRequest{Messages: userText("hi")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want context.DeadlineExceeded", err)
	}
	if pe := providerError(t, err); pe.Class != model.ClassTimeout {
		t.Errorf("class %s", pe.Class)
	}
}

func TestMalformedResponses(t *testing.T) {
	cases := map[string]func(w http.ResponseWriter){
		"truncated JSON": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"msg_1","content":[{"type":"text","te`)
		},
		"not JSON": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `<html>bad gateway</html>`)
		},
		"not a message": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"hello":"world"}`)
		},
		"content not a list": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"type":"message","content":"text","usage":{"input_tokens":"many"}}`)
		},
		"HTML": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, `<html>hi</html>`)
		},
		"odd blocks": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"type":"message","content":[null,5,{"type":"text"},{"type":"tool_use","input":7}]}`)
		},
		"empty": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
		},
	}
	for name, write := range cases {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) { write(w) })
			_, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
			pe := providerError(t, err)
			if pe.Status != http.StatusOK || pe.Class != model.ClassServer {
				t.Errorf("got %+v", pe)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("%d requests, want 1", n)
			}
		})
	}
}

func TestNonJSONErrorBody(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Retry-After-Ms", "0")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html>upstream down</html>")
	})
	_, err := f.model(t, Config{}).Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	pe := providerError(t, err)
	if pe.Status != http.StatusBadGateway || pe.Class != model.ClassServer || !strings.Contains(pe.Message, "upstream down") {
		t.Errorf("got %+v", pe)
	}
}

func TestConnectionRefusedIsATimeoutClass(t *testing.T) {
	f := newFake(t, textReply("x"))
	m := f.model(t, Config{MaxRetries: -1})
	f.srv.Close()
	_, err := m.Generate(context.Background(), svc.ModelRequest{Messages: userText("hi")})
	if pe := providerError(t, err); pe.Class != model.ClassTimeout || pe.Status != 0 || !pe.Fallback() {
		t.Errorf("got %+v", pe)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// FuzzResponse feeds arbitrary bodies through the SDK's decoding and this
// package's reading of them: a bad body is an error, never a panic.
func FuzzResponse(f *testing.F) {
	for _, s := range []string{
		`{"type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":1,"output_tokens":2}}`,
		`{"content":[{"type":"tool_use","id":"t","name":"final_answer","input":{"value":[1]}}]}`,
		`{"content":[{"type":"tool_use","id":"t","name":"x","input":null},{"type":"text","text":"{}"}]}`,
		`{"content":[null,5,{"type":"tool_use","input":7}]}`,
		`{"content":"x"}`, `[]`, `null`, `{`,
	} {
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, structured bool) {
		var msg anthropic.Message
		if json.Unmarshal(body, &msg) != nil {
			return
		}
		b := &built{}
		if structured {
			b = &built{structured: StructuredTool, finalTool: FinalAnswerTool, wrapped: true}
		}
		resp, err := b.response("m", &msg, nil)
		if err != nil {
			return
		}
		if len(resp.ToolCalls) == 0 && !json.Valid(resp.Output) {
			t.Errorf("output %q is not JSON", resp.Output)
		}
		for _, c := range resp.ToolCalls {
			if c.Name == "" || !json.Valid(c.Arguments) {
				t.Errorf("bad tool call %+v", c)
			}
		}
	})
}
