package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/openai"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorded is one request the fake server received.
type recorded struct {
	path   string
	header http.Header
	body   map[string]any
}

// fake is a Chat Completions server. handle answers the n-th request
// (from 0).
type fake struct {
	srv    *httptest.Server
	mu     sync.Mutex
	reqs   []recorded
	handle func(w http.ResponseWriter, r *http.Request, n int)
}

func newFake(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *fake {
	t.Helper()
	f := &fake{handle: handle}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("request body is not a JSON object: %v: %s", err, raw)
		}
		f.mu.Lock()
		n := len(f.reqs)
		f.reqs = append(f.reqs, recorded{path: r.URL.Path, header: r.Header.Clone(), body: body})
		f.mu.Unlock()
		if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
			t.Errorf("request %s %s; want POST /v1/chat/completions", r.Method, r.URL.Path)
		}
		f.handle(w, r, n)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// model returns a model talking to the fake server with key sk-test.
func (f *fake) model(t *testing.T, cfg openai.Config) svc.Model {
	t.Helper()
	if cfg.BaseURL == "" {
		cfg.BaseURL = f.srv.URL + "/v1"
	}
	if cfg.APIKey == "" {
		cfg.APIKey = "sk-test"
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = f.srv.Client()
	}
	m, err := openai.NewWithConfig("gpt-test", cfg)
	if err != nil {
		t.Fatalf("NewWithConfig: %v", err)
	}
	return m
}

func reply(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// completion is an answer with the given message and usage 11 in, 7 out.
func completion(message string) string {
	return `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-test",
		"choices":[{"index":0,"finish_reason":"stop","message":` + message + `}],
		"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}`
}

func answer(text string) func(w http.ResponseWriter, r *http.Request, n int) {
	return func(w http.ResponseWriter, _ *http.Request, _ int) {
		b, _ := json.Marshal(text)
		reply(w, http.StatusOK, completion(`{"role":"assistant","content":`+string(b)+`}`))
	}
}

func userText(s string) svc.ModelRequest {
	b, _ := json.Marshal(s)
	return svc.ModelRequest{Model: "gpt-test", Messages: []svc.Message{{Role: svc.RoleUser, Content: b}}}
}

// jsonEqual compares a decoded request field with the JSON want.
func jsonEqual(t *testing.T, what string, got any, want string) {
	t.Helper()
	var w any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("%s: bad want: %v", what, err)
	}
	if !reflect.DeepEqual(got, w) {
		g, _ := json.Marshal(got)
		t.Errorf("%s:\n got %s\nwant %s", what, g, want)
	}
}

func providerError(t *testing.T, err error) *model.ProviderError {
	t.Helper()
	var pe *model.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T) is not a *model.ProviderError", err, err)
	}
	return pe
}

func TestRequestBody(t *testing.T) {
	f := newFake(t, answer("done"))
	m := f.model(t, openai.Config{})
	req := svc.ModelRequest{
		Model:        "gpt-test",
		Instructions: "Be brief.",
		Messages: []svc.Message{
			{Role: svc.RoleUser, Content: json.RawMessage(`"What is the weather?"`)},
			{Role: svc.RoleAssistant, Content: json.RawMessage(`"Let me check."`), ToolCalls: []svc.ToolCall{
				{ID: "call_1", Name: "weather", Arguments: json.RawMessage(`{"city": "Paris"}`)},
			}},
			{Role: svc.RoleTool, ToolCallID: "call_1", Content: json.RawMessage(`{"temp":21}`)},
			{Role: svc.RoleAssistant, ToolCalls: []svc.ToolCall{{ID: "call_2", Name: "weather"}}},
			{Role: svc.RoleTool, ToolCallID: "call_2", Content: json.RawMessage(`"city not found"`), IsError: true},
			{Role: svc.RoleAssistant, Content: json.RawMessage(`{"draft":true}`)},
			{Role: svc.RoleUser, Content: json.RawMessage(`{"text":"hi","n":2}`)},
		},
		Tools: []svc.ToolSpec{
			{Name: "weather", Description: "Get the weather", InputSchema: json.RawMessage(
				`{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"]}`)},
			{Name: "ping"},
		},
		Settings: map[string]any{
			"temperature": 0.2,
			"max_tokens":  512, // an int, as YAML gives it
			"top_p":       0.9,
			"seed":        float64(7), // a float, as JSON gives it
			"stop":        []any{"END", "STOP"},
			// Passed through.
			"top_k":                40,
			"chat_template_kwargs": map[string]any{"enable_thinking": false},
			// The provider's own: never sent.
			"api_key":     "sk-settings",
			"timeout":     "30s",
			"max_retries": 1,
			// The test provider's: ignored.
			"fail_times": 3,
			"latency_ms": 5,
			"none":       nil,
		},
	}
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if string(resp.Output) != `"done"` {
		t.Errorf("Output = %s; want \"done\"", resp.Output)
	}
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests; want 1", len(reqs))
	}
	r := reqs[0]
	if got := r.header.Get("Authorization"); got != "Bearer sk-settings" {
		t.Errorf("Authorization = %q; want the key from model_settings", got)
	}
	b := r.body
	jsonEqual(t, "model", b["model"], `"gpt-test"`)
	jsonEqual(t, "messages", b["messages"], `[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":"What is the weather?"},
		{"role":"assistant","content":"Let me check.","tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"{\"temp\":21}"},
		{"role":"assistant","tool_calls":[
			{"id":"call_2","type":"function","function":{"name":"weather","arguments":"{}"}}]},
		{"role":"tool","tool_call_id":"call_2","content":"Error: city not found"},
		{"role":"assistant","content":"{\"draft\":true}"},
		{"role":"user","content":"{\"text\":\"hi\",\"n\":2}"}
	]`)
	jsonEqual(t, "tools", b["tools"], `[
		{"type":"function","function":{"name":"weather","description":"Get the weather",
			"parameters":{"type":"object","properties":{"city":{"type":"string","maxLength":100}},"required":["city"]}}},
		{"type":"function","function":{"name":"ping","parameters":{"type":"object","properties":{}}}}
	]`)
	jsonEqual(t, "temperature", b["temperature"], `0.2`)
	jsonEqual(t, "max_tokens", b["max_tokens"], `512`)
	jsonEqual(t, "top_p", b["top_p"], `0.9`)
	jsonEqual(t, "seed", b["seed"], `7`)
	jsonEqual(t, "stop", b["stop"], `["END","STOP"]`)
	jsonEqual(t, "top_k", b["top_k"], `40`)
	jsonEqual(t, "chat_template_kwargs", b["chat_template_kwargs"], `{"enable_thinking":false}`)
	for _, k := range []string{"max_completion_tokens", "api_key", "timeout", "max_retries", "fail_times", "latency_ms",
		"none", "response_format", "stream"} {
		if v, ok := b[k]; ok {
			t.Errorf("body has %s = %v; want it absent", k, v)
		}
	}
}

func TestStopAndOtherProvidersSettings(t *testing.T) {
	f := newFake(t, answer("ok"))
	m := f.model(t, openai.Config{})
	for _, tt := range []struct {
		settings map[string]any
		want     string
	}{
		{map[string]any{"stop": "END"}, `"END"`},
		{map[string]any{"stop": "END", "stop_sequences": []any{"STOP"}}, `["END","STOP"]`},
		{map[string]any{"stop_sequences": []string{"STOP"}}, `["STOP"]`},
	} {
		req := userText("hi")
		req.Settings = tt.settings
		req.Settings["tool_choice"] = "none"
		req.Settings["structured_output"] = "tool" // the anthropic provider's
		if _, err := m.Generate(context.Background(), req); err != nil {
			t.Fatalf("Generate: %v", err)
		}
		reqs := f.requests()
		b := reqs[len(reqs)-1].body
		jsonEqual(t, "stop", b["stop"], tt.want)
		jsonEqual(t, "tool_choice", b["tool_choice"], `"none"`)
		jsonEqual(t, "messages", b["messages"], `[{"role":"user","content":"hi"}]`)
		for _, k := range []string{"stop_sequences", "structured_output"} {
			if _, ok := b[k]; ok {
				t.Errorf("body has %s; want it absent", k)
			}
		}
	}
}

func TestToolCalls(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		reply(w, http.StatusOK, completion(`{"role":"assistant","content":"Checking both.","tool_calls":[
			{"id":"call_a","type":"function","function":{"name":"weather","arguments":"{\"city\": \"Paris\"}"}},
			{"id":"call_b","type":"function","function":{"name":"ping","arguments":""}},
			{"type":"function","function":{"name":"weather","arguments":"{\"city\":"}}
		]}`))
	})
	m := f.model(t, openai.Config{})
	req := userText("weather?")
	req.Tools = []svc.ToolSpec{{Name: "weather"}, {Name: "ping"}}
	resp, err := m.Generate(context.Background(), req)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	want := []svc.ToolCall{
		{ID: "call_a", Name: "weather", Arguments: json.RawMessage(`{"city":"Paris"}`)},
		{ID: "call_b", Name: "ping", Arguments: json.RawMessage(`{}`)},
		// No id from the server: one is made up. Arguments that are not
		// JSON are kept as a string, for the tool's validation to reject.
		{ID: "call_2", Name: "weather", Arguments: json.RawMessage(`"{\"city\":"`)},
	}
	if len(resp.ToolCalls) != len(want) {
		t.Fatalf("ToolCalls = %+v; want %d calls", resp.ToolCalls, len(want))
	}
	for i, c := range resp.ToolCalls {
		if c.ID != want[i].ID || c.Name != want[i].Name || string(c.Arguments) != string(want[i].Arguments) {
			t.Errorf("call %d = {%s %s %s}; want {%s %s %s}", i, c.ID, c.Name, c.Arguments, want[i].ID, want[i].Name, want[i].Arguments)
		}
	}
	if string(resp.Output) != `"Checking both."` {
		t.Errorf("Output = %s; want the text beside the calls", resp.Output)
	}
	if resp.InputTokens != 11 || resp.OutputTokens != 7 || resp.Tokens() != 18 {
		t.Errorf("tokens in/out/total = %d/%d/%d; want 11/7/18", resp.InputTokens, resp.OutputTokens, resp.Tokens())
	}
}

func TestContentParts(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		reply(w, http.StatusOK, completion(`{"role":"assistant","content":[{"type":"text","text":"Hello, "},{"type":"text","text":"world"}]}`))
	})
	resp, err := f.model(t, openai.Config{}).Generate(context.Background(), userText("hi"))
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	if string(resp.Output) != `"Hello, world"` {
		t.Errorf("Output = %s; want the parts joined", resp.Output)
	}
}

func TestStructuredOutput(t *testing.T) {
	strict := `{"type":"object","properties":{"category":{"type":"string","enum":["billing","tech"]}},"required":["category"],"additionalProperties":false}`
	loose := `{"type":"object","properties":{"category":{"type":"string","minLength":1}},"required":["category"]}`
	list := `{"type":"array","items":{"$ref":"#/$defs/n"},"$defs":{"n":{"type":"integer"}}}`
	tests := []struct {
		name, schema, content string
		wantFormat            string // response_format; "" for none
		wantOutput            string
	}{
		{"strict schema", strict, `{"category": "billing"}`,
			`{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":` + strict + `}}`,
			`{"category":"billing"}`},
		{"schema outside strict mode", loose, `{"category":"tech"}`,
			`{"type":"json_schema","json_schema":{"name":"output","strict":false,"schema":` + loose + `}}`,
			`{"category":"tech"}`},
		{"non-object schema is wrapped", list, `{"value":[1, 2]}`,
			`{"type":"json_schema","json_schema":{"name":"output","strict":true,"schema":{
				"type":"object","properties":{"value":{"type":"array","items":{"$ref":"#/$defs/n"}}},
				"required":["value"],"additionalProperties":false,"$defs":{"n":{"type":"integer"}}}}}`,
			`[1,2]`},
		{"fenced JSON", strict, "```json\n{\"category\":\"tech\"}\n```", "", `{"category":"tech"}`},
		{"not JSON is a string", strict, `I think billing`, "", `"I think billing"`},
		{"schema that constrains nothing", `true`, `{"a":1}`, "none", `{"a":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, answer(tt.content))
			req := userText("classify")
			req.OutputSchema = json.RawMessage(tt.schema)
			resp, err := f.model(t, openai.Config{}).Generate(context.Background(), req)
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if string(resp.Output) != tt.wantOutput {
				t.Errorf("Output = %s; want %s", resp.Output, tt.wantOutput)
			}
			rf, ok := f.requests()[0].body["response_format"]
			switch tt.wantFormat {
			case "":
			case "none":
				if ok {
					t.Errorf("response_format = %v; want none", rf)
				}
			default:
				jsonEqual(t, "response_format", rf, tt.wantFormat)
			}
		})
	}
}

func TestMaxTokensToOpenAI(t *testing.T) {
	f := newFake(t, answer("ok"))
	// api.openai.com, reached through a transport that sends everything to
	// the fake server.
	target, _ := url.Parse(f.srv.URL)
	base := f.srv.Client().Transport
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Host != "api.openai.com" {
			t.Errorf("request to %s; want api.openai.com", r.URL)
		}
		r = r.Clone(r.Context())
		r.URL.Scheme, r.URL.Host, r.Host = target.Scheme, target.Host, ""
		return base.RoundTrip(r)
	})}
	t.Setenv("OPENAI_API_KEY", "sk-env")
	t.Setenv("OPENAI_BASE_URL", "")
	m, err := openai.NewWithConfig("gpt-5", openai.Config{HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	req := userText("hi")
	req.Model = "gpt-5"
	req.Settings = map[string]any{"max_tokens": 100, "reasoning_effort": "low",
		// For an Anthropic fallback; api.openai.com would reject them.
		"top_k": 5, "thinking": map[string]any{"type": "enabled", "budget_tokens": 1024}}
	if _, err := m.Generate(context.Background(), req); err != nil {
		t.Fatalf("Generate: %v", err)
	}
	r := f.requests()[0]
	jsonEqual(t, "max_completion_tokens", r.body["max_completion_tokens"], `100`)
	jsonEqual(t, "reasoning_effort", r.body["reasoning_effort"], `"low"`)
	for _, k := range []string{"max_tokens", "top_k", "thinking"} {
		if _, ok := r.body[k]; ok {
			t.Errorf("body has %s; api.openai.com rejects it", k)
		}
	}
	if got := r.header.Get("Authorization"); got != "Bearer sk-env" {
		t.Errorf("Authorization = %q; want the key from OPENAI_API_KEY", got)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestMissingKeyForOpenAI(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("OPENAI_BASE_URL", "")
	m, err := openai.New("gpt-4o-mini")
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// Fails before any request: the default transport would otherwise try
	// the real API.
	_, err = m.Generate(context.Background(), userText("hi"))
	pe := providerError(t, err)
	if pe.Class != model.ClassAuth || !strings.Contains(pe.Message, "OPENAI_API_KEY") {
		t.Errorf("error = %v; want an auth error naming OPENAI_API_KEY", err)
	}
}

func TestKeys(t *testing.T) {
	t.Setenv("MY_LOCAL_KEY", "sk-from-env-var")
	t.Setenv("UNSET_KEY_VAR", "")
	f := newFake(t, answer("ok"))
	other := newFake(t, answer("ok"))
	tests := []struct {
		name       string
		cfgKey     string
		settings   map[string]any
		wantAuth   string
		wantErr    model.Class
		wantServer *fake
	}{
		{name: "configured key", cfgKey: "sk-cfg", wantAuth: "Bearer sk-cfg", wantServer: f},
		{name: "no key for a local server", cfgKey: "", wantAuth: "", wantServer: f},
		{name: "api_key_env", cfgKey: "sk-cfg", settings: map[string]any{"api_key_env": "MY_LOCAL_KEY"},
			wantAuth: "Bearer sk-from-env-var", wantServer: f},
		{name: "base_url elsewhere does not get the configured key", cfgKey: "sk-cfg",
			settings: map[string]any{"base_url": other.srv.URL + "/v1"}, wantAuth: "", wantServer: other},
		{name: "base_url elsewhere with its own key", cfgKey: "sk-cfg",
			settings: map[string]any{"base_url": other.srv.URL + "/v1", "api_key": "sk-other"}, wantAuth: "Bearer sk-other", wantServer: other},
		{name: "base_url on the configured origin keeps the key", cfgKey: "sk-cfg",
			settings: map[string]any{"base_url": f.srv.URL + "/v1/"}, wantAuth: "Bearer sk-cfg", wantServer: f},
		{name: "api_key_env not set", cfgKey: "sk-cfg", settings: map[string]any{"api_key_env": "UNSET_KEY_VAR"},
			wantErr: model.ClassAuth},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OPENAI_API_KEY", "")
			before := len(tt.wantServer.requestsOrNil())
			m, err := openai.NewWithConfig("gpt-test", openai.Config{
				BaseURL: f.srv.URL + "/v1", APIKey: tt.cfgKey, HTTPClient: &http.Client{Transport: sharedTransport(t)},
			})
			if err != nil {
				t.Fatal(err)
			}
			req := userText("hi")
			req.Settings = tt.settings
			_, err = m.Generate(context.Background(), req)
			if tt.wantErr != "" {
				if pe := providerError(t, err); pe.Class != tt.wantErr {
					t.Errorf("class = %s; want %s", pe.Class, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			reqs := tt.wantServer.requests()
			if len(reqs) != before+1 {
				t.Fatalf("server got %d requests; want %d", len(reqs), before+1)
			}
			got, ok := reqs[len(reqs)-1].header["Authorization"]
			if tt.wantAuth == "" && ok {
				t.Errorf("Authorization = %q; want none", got)
			}
			if tt.wantAuth != "" && (len(got) != 1 || got[0] != tt.wantAuth) {
				t.Errorf("Authorization = %q; want %q", got, tt.wantAuth)
			}
		})
	}
}

func (f *fake) requestsOrNil() []recorded {
	if f == nil {
		return nil
	}
	return f.requests()
}

// sharedTransport is a transport whose idle connections are closed when
// the test ends.
func sharedTransport(t *testing.T) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

func TestNewErrors(t *testing.T) {
	if _, err := openai.New(""); err == nil {
		t.Error("New(\"\") succeeded; want an error")
	}
	if _, err := openai.NewWithConfig("gpt", openai.Config{BaseURL: "ftp://example.com"}); !errors.Is(err, svc.ErrSpecValidation) {
		t.Errorf("bad base URL: error %v; want a SpecValidationError", err)
	}
}

func TestErrorBodyOfCompatibleServer(t *testing.T) {
	for name, body := range map[string]string{
		// vLLM's shape has no "error" member.
		"vLLM":                     `{"object":"error","message":"The model gpt-test does not exist.","type":"NotFoundError","code":404}`,
		"error as a string":        `{"error":"The model gpt-test does not exist."}`,
		"detail (FastAPI proxies)": `{"detail":"The model gpt-test does not exist."}`,
		"plain text":               `The model gpt-test does not exist.`,
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
				reply(w, http.StatusNotFound, body)
			})
			_, err := f.model(t, openai.Config{}).Generate(context.Background(), userText("hi"))
			pe := providerError(t, err)
			if pe.Class != model.ClassInvalid || pe.Status != 404 || pe.Message != "The model gpt-test does not exist." {
				t.Errorf("error = %+v; want invalid_request, HTTP 404, the server's message", pe)
			}
		})
	}
}

func TestRateLimitRetried(t *testing.T) {
	for name, headers := range map[string]map[string]string{
		// retry-after-ms wins over Retry-After, which keeps the test fast
		// while both are sent.
		"retry-after-ms and Retry-After": {"Retry-After": "1", "retry-after-ms": "5"},
		"Retry-After":                    {"Retry-After": "0"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
				if n == 0 {
					for k, v := range headers {
						w.Header().Set(k, v)
					}
					reply(w, http.StatusTooManyRequests, `{"error":{"message":"Rate limit reached","type":"requests"}}`)
					return
				}
				answer("ok")(w, r, n)
			})
			resp, err := f.model(t, openai.Config{}).Generate(context.Background(), userText("hi"))
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if string(resp.Output) != `"ok"` {
				t.Errorf("Output = %s; want \"ok\"", resp.Output)
			}
			reqs := f.requests()
			if len(reqs) != 2 {
				t.Fatalf("%d requests; want 2 (one retry)", len(reqs))
			}
			jsonEqual(t, "retried body", reqs[1].body["messages"], `[{"role":"user","content":"hi"}]`)
		})
	}
}

func TestRateLimitExhausted(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("retry-after-ms", "3")
		reply(w, http.StatusTooManyRequests, `{"error":{"message":"Rate limit reached"}}`)
	})
	_, err := f.model(t, openai.Config{}).Generate(context.Background(), userText("hi"))
	pe := providerError(t, err)
	if pe.Class != model.ClassRateLimit || pe.Status != 429 || pe.RetryAfter != 3*time.Millisecond {
		t.Errorf("error = %+v; want rate_limit, HTTP 429, RetryAfter 3ms", pe)
	}
	if !pe.Fallback() {
		t.Error("a 429 does not allow fallback; want it to")
	}
	if n := len(f.requests()); n != 1+openai.DefaultMaxRetries {
		t.Errorf("%d requests; want %d", n, 1+openai.DefaultMaxRetries)
	}
}

func TestRetryCounts(t *testing.T) {
	overloaded := func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.Header().Set("retry-after-ms", "0")
		reply(w, http.StatusServiceUnavailable, `<html>busy</html>`)
	}
	tests := []struct {
		name     string
		cfg      int
		settings map[string]any
		want     int
	}{
		{"Config.MaxRetries", 4, nil, 5},
		{"negative Config.MaxRetries is none", -1, nil, 1},
		{"max_retries setting wins", 4, map[string]any{"max_retries": 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, overloaded)
			req := userText("hi")
			req.Settings = tt.settings
			_, err := f.model(t, openai.Config{MaxRetries: tt.cfg}).Generate(context.Background(), req)
			pe := providerError(t, err)
			if pe.Class != model.ClassOverloaded || pe.Message != "<html>busy</html>" {
				t.Errorf("error = %+v; want overloaded with the body as message", pe)
			}
			if n := len(f.requests()); n != tt.want {
				t.Errorf("%d requests; want %d", n, tt.want)
			}
		})
	}
}

func TestTimeoutSetting(t *testing.T) {
	f := newFake(t, func(_ http.ResponseWriter, r *http.Request, _ int) {
		<-r.Context().Done()
	})
	req := userText("hi")
	req.Settings = map[string]any{"timeout": "20ms"}
	_, err := f.model(t, openai.Config{}).Generate(context.Background(), req)
	pe := providerError(t, err)
	if pe.Class != model.ClassTimeout || !pe.Fallback() {
		t.Errorf("error = %+v; want a timeout that allows fallback", pe)
	}
}

func TestConnectionRefused(t *testing.T) {
	// A port that was just free: nothing listens there.
	srv := httptest.NewServer(http.NotFoundHandler())
	addr := srv.URL
	srv.Close()
	m, err := openai.NewWithConfig("gpt-test", openai.Config{BaseURL: addr + "/v1", MaxRetries: -1,
		HTTPClient: &http.Client{Transport: sharedTransport(t)}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Generate(context.Background(), userText("hi"))
	pe := providerError(t, err)
	if pe.Status != 0 || (pe.Class != model.ClassServer && pe.Class != model.ClassTimeout) || !pe.Fallback() {
		t.Errorf("error = %+v; want no status, server or timeout class", pe)
	}
}

func TestMalformedResponses(t *testing.T) {
	for name, tt := range map[string]struct{ contentType, body string }{
		"not JSON":             {"application/json", `this is not json`},
		"truncated":            {"application/json", `{"choices":[{"message":{"role":"assistant","content":"hi`},
		"HTML":                 {"text/html", `<html><body>Bad gateway</body></html>`},
		"empty":                {"application/json", ``},
		"null":                 {"application/json", `null`},
		"a list":               {"application/json", `[]`},
		"no choices":           {"application/json", `{"choices":[]}`},
		"choices not a list":   {"application/json", `{"choices":"many"}`},
		"message not object":   {"application/json", `{"choices":[{"message":5}]}`},
		"no message":           {"application/json", `{"choices":[{"index":0}]}`},
		"content a number":     {"application/json", `{"choices":[{"message":{"content":42}}]}`},
		"tool_calls an object": {"application/json", `{"choices":[{"message":{"tool_calls":{"id":"x"}}}]}`},
		"tool call no name":    {"application/json", `{"choices":[{"message":{"tool_calls":[{"id":"x","type":"function","function":{"arguments":"{}"}}]}}]}`},
		"tool call odd type":   {"application/json", `{"choices":[{"message":{"tool_calls":[{"id":"x","type":"mystery"}]}}]}`},
		"error in a 200":       {"application/json", `{"error":{"message":"upstream failed"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
				w.Header().Set("Content-Type", tt.contentType)
				_, _ = io.WriteString(w, tt.body)
			})
			_, err := f.model(t, openai.Config{}).Generate(context.Background(), userText("hi"))
			pe := providerError(t, err)
			if pe.Class != model.ClassServer || pe.Message == "" {
				t.Errorf("error = %+v; want a server-class ProviderError with a message", pe)
			}
		})
	}
}

func TestOddButUsableResponses(t *testing.T) {
	for name, tt := range map[string]struct{ body, want string }{
		"JSON with a text content type": {`{"choices":[{"message":{"content":"hi"}}]}`, `"hi"`},
		"no usage":                      {`{"choices":[{"message":{"content":"hi"}}]}`, `"hi"`},
		"odd usage":                     {`{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":"3","completion_tokens":null,"total_tokens":{}}}`, `"hi"`},
		"refusal":                       {`{"choices":[{"message":{"content":null,"refusal":"I can't help with that."}}]}`, `"I can't help with that."`},
		"arguments as an object":        {`{"choices":[{"message":{"tool_calls":[{"id":"c","function":{"name":"f","arguments":{"a": 1}}}]}}]}`, ``},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
				w.Header().Set("Content-Type", "text/plain")
				_, _ = io.WriteString(w, tt.body)
			})
			resp, err := f.model(t, openai.Config{}).Generate(context.Background(), userText("hi"))
			if err != nil {
				t.Fatalf("Generate: %v", err)
			}
			if tt.want == "" {
				if len(resp.ToolCalls) != 1 || string(resp.ToolCalls[0].Arguments) != `{"a":1}` {
					t.Errorf("ToolCalls = %+v; want f with {\"a\":1}", resp.ToolCalls)
				}
				return
			}
			if string(resp.Output) != tt.want {
				t.Errorf("Output = %s; want %s", resp.Output, tt.want)
			}
		})
	}
}
