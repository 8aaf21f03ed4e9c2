package bedrock_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/bedrock"
)

// fake is a Converse server that records each request and answers with
// the n-th of its answers.
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
		f.paths, f.headers, f.bodies = append(f.paths, r.URL.EscapedPath()), append(f.headers, r.Header.Clone()), append(f.bodies, body)
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

// A tool loop as Converse sees it: the model id escaped in the path, a
// SigV4 signature for bedrock in the configured region, the system
// prompt, toolSpec with its JSON schema, inferenceConfig; the call comes
// back with Bedrock's toolUseId, and the next turn sends the toolUse and
// its toolResult (json, status error for a failed call) in one user turn.
func TestToolLoopOnTheWire(t *testing.T) {
	f := newFake(t,
		`{"output":{"message":{"role":"assistant","content":[{"text":"Looking."},{"toolUse":{"toolUseId":"tooluse_abc","name":"lookup","input":{"word":"svc"}}},{"toolUse":{"toolUseId":"tooluse_def","name":"ping","input":{}}}]}},
		  "stopReason":"tool_use","usage":{"inputTokens":20,"outputTokens":5,"totalTokens":45,"cacheReadInputTokens":16,"cacheWriteInputTokens":4}}`,
		`{"output":{"message":{"role":"assistant","content":[{"text":"a service"}]}},"stopReason":"end_turn","usage":{"inputTokens":30,"outputTokens":2,"totalTokens":32}}`)
	m, err := bedrock.NewWithConfig("anthropic.claude-3-5-haiku-20241022-v1:0", bedrock.Config{AWS: awsConfig(), BaseURL: f.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	req := svc.ModelRequest{
		Instructions: "Be brief.",
		Messages:     []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"what is svc?"`)}},
		Tools: []svc.ToolSpec{
			{Name: "lookup", Description: "Looks a word up.", InputSchema: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}},"required":["word"]}`)},
			{Name: "ping", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		Settings: map[string]any{"temperature": 0.5, "max_tokens": 100, "stop_sequences": []any{"END"}, "reasoning_effort": "low"},
	}
	resp, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 2 || resp.ToolCalls[0].ID != "tooluse_abc" || resp.ToolCalls[0].Name != "lookup" || string(resp.ToolCalls[0].Arguments) != `{"word":"svc"}` {
		t.Fatalf("tool calls %+v", resp.ToolCalls)
	}
	if resp.InputTokens != 40 || resp.CachedInputTokens != 16 || resp.OutputTokens != 5 {
		t.Errorf("usage in %d (cached %d) out %d; want 20+16+4, 16, 5", resp.InputTokens, resp.CachedInputTokens, resp.OutputTokens)
	}
	if f.paths[0] != "/model/anthropic.claude-3-5-haiku-20241022-v1%3A0/converse" {
		t.Errorf("path %s", f.paths[0])
	}
	if a := f.headers[0].Get("Authorization"); !strings.HasPrefix(a, "AWS4-HMAC-SHA256 Credential="+accessKey+"/") || !strings.Contains(a, "/eu-west-1/bedrock/aws4_request") {
		t.Errorf("Authorization %q; want SigV4 for bedrock in eu-west-1", a)
	}
	b := f.bodies[0]
	if get(b, "system", 0, "text") != "Be brief." || get(b, "toolConfig", "tools", 0, "toolSpec", "inputSchema", "json", "required", 0) != "word" {
		t.Errorf("system %v, tools %v", get(b, "system"), get(b, "toolConfig"))
	}
	ic := get(b, "inferenceConfig")
	if get(ic, "temperature") != 0.5 || get(ic, "maxTokens") != 100.0 || get(ic, "stopSequences", 0) != "END" || get(b, "reasoning_effort") != nil {
		t.Errorf("inferenceConfig %v", ic)
	}

	req.Messages = append(req.Messages,
		svc.Message{Role: svc.RoleAssistant, Content: resp.Output, ToolCalls: resp.ToolCalls},
		svc.Message{Role: svc.RoleTool, ToolCallID: "tooluse_abc", Content: json.RawMessage(`{"meaning":"a service"}`)},
		svc.Message{Role: svc.RoleTool, ToolCallID: "tooluse_def", Content: json.RawMessage(`"no route"`), IsError: true})
	if resp, err = m.Generate(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `"a service"` {
		t.Errorf("output %s", resp.Output)
	}
	msgs, _ := get(f.bodies[1], "messages").([]any)
	if len(msgs) != 3 {
		t.Fatalf("%d messages; want user, assistant, one user turn of results: %v", len(msgs), msgs)
	}
	if get(msgs[1], "content", 1, "toolUse", "toolUseId") != "tooluse_abc" || get(msgs[1], "content", 0, "text") != "Looking." {
		t.Errorf("assistant turn %v", msgs[1])
	}
	r0, r1 := get(msgs[2], "content", 0, "toolResult"), get(msgs[2], "content", 1, "toolResult")
	if get(r0, "toolUseId") != "tooluse_abc" || get(r0, "content", 0, "json", "meaning") != "a service" || get(r0, "status") != nil {
		t.Errorf("first result %v", r0)
	}
	if get(r1, "toolUseId") != "tooluse_def" || get(r1, "content", 0, "text") != "no route" || get(r1, "status") != "error" {
		t.Errorf("failed result %v", r1)
	}
}

// ConverseStream through the SDK against llmsim's binary event stream:
// text deltas in order, tool-use input assembled from its fragments,
// usage from the metadata event.
func TestStreamThroughSDK(t *testing.T) {
	sim := start(t, llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{
		{Match: llmsim.Match{Contains: "weather"}, Reply: llmsim.Reply{Text: "Let me look.", ToolCalls: []llmsim.ToolCall{{Name: "forecast", Arguments: `{"city":"Oslo","days":3}`}}}},
	}}})
	m := newModel(t, sim, "amazon.nova-pro-v1:0")
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
		t.Errorf("usage %d/%d", resp.InputTokens, resp.OutputTokens)
	}
	resp, err = ask("what is the weather?")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].Name != "forecast" || string(resp.ToolCalls[0].Arguments) != `{"city":"Oslo","days":3}` || resp.ToolCalls[0].ID != "tooluse_1" {
		t.Errorf("streamed tool calls %+v", resp.ToolCalls)
	}
	if strings.Join(deltas, "") != "Let me look." {
		t.Errorf("deltas %q", deltas)
	}
	if n := sim.Stats()[accessKey+"/amazon.nova-pro-v1:0"]; n != 2 {
		t.Errorf("llmsim saw %v", sim.Stats())
	}

	sim2 := start(t, llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{{StallAfterTokens: 2}}}})
	m2 := newModel(t, sim2, "amazon.nova-pro-v1:0")
	_, err = m2.Generate(t.Context(), svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"a long enough answer to stall"`)}},
		Settings: map[string]any{"stream_idle_timeout_ms": 200}, OnDelta: func(string) {}})
	if pe, ok := errors.AsType[*model.ProviderError](err); !ok || pe.Class != model.ClassTimeout {
		t.Errorf("a stalled stream: %v; want a timeout", err)
	}
}

// The standard AWS environment configures New: credentials, region and
// the service's endpoint variable; a wrong key is Bedrock's 403 (auth, no
// fallback); no credentials at all is an auth error.
func TestFromAWSEnvironment(t *testing.T) {
	sim := start(t, llmsim.Config{Keys: []string{"AKIDFROMENV"}})
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_REGION", "ap-southeast-2")
	t.Setenv("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", sim.URL())
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFROMENV")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	ask := svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"hi"`)}}, Settings: map[string]any{"max_retries": 0}}
	m, err := bedrock.New("amazon.nova-micro-v1:0")
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := m.Generate(t.Context(), ask); err != nil || string(resp.Output) != `"hi"` {
		t.Fatalf("%s, %v", resp.Output, err)
	}
	if sim.Stats()["AKIDFROMENV/amazon.nova-micro-v1:0"] != 1 {
		t.Errorf("llmsim saw %v", sim.Stats())
	}

	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDWRONG")
	m, _ = bedrock.New("amazon.nova-micro-v1:0")
	_, err = m.Generate(t.Context(), ask)
	if pe, ok := errors.AsType[*model.ProviderError](err); !ok || pe.Class != model.ClassAuth || pe.Status != 403 || pe.Fallback() {
		t.Errorf("a wrong key: %v; want a 403 auth error", err)
	}

	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	m, _ = bedrock.New("amazon.nova-micro-v1:0")
	_, err = m.Generate(t.Context(), ask)
	if pe, ok := errors.AsType[*model.ProviderError](err); !ok || pe.Class != model.ClassAuth {
		t.Errorf("no credentials: %v; want an auth error", err)
	}
}

// A ThrottlingException is a rate limit the SDK retries, then reports.
func TestThrottledThroughSDK(t *testing.T) {
	sim := start(t, llmsim.Config{RPM: 1})
	m := newModel(t, sim, "amazon.nova-lite-v1:0")
	ask := svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"x"`)}}}
	if _, err := m.Generate(t.Context(), ask); err != nil {
		t.Fatal(err)
	}
	_, err := m.Generate(t.Context(), ask)
	if pe, ok := errors.AsType[*model.ProviderError](err); !ok || pe.Class != model.ClassRateLimit || pe.Status != 429 || !pe.Fallback() {
		t.Errorf("throttled: %v; want a 429 rate limit", err)
	}
	if n := sim.Throttled()[accessKey+"/amazon.nova-lite-v1:0"]; n != 3 {
		t.Errorf("%d throttled attempts; want 3 (the call and two retries)", n)
	}
}

// A stream that pauses between events (a model writing at 50 tokens a
// second) is read to its end, every time: the SDK's handling of its
// request body once made net/http close the connection under about a
// third of such streams after their first event.
func TestStreamSurvivesPauses(t *testing.T) {
	for i := range 8 {
		sim := start(t, llmsim.Config{TokensPerSecond: 50})
		m := newModel(t, sim, "amazon.nova-pro-v1:0")
		n := 0
		resp, err := m.Generate(t.Context(), svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"an answer long enough to pause"`)}},
			OnDelta: func(string) { n++ }})
		if err != nil || string(resp.Output) != `"an answer long enough to pause"` {
			t.Fatalf("stream %d: %s after %d deltas, %v", i, resp.Output, n, err)
		}
	}
}

// What svc validate asks before any call: each bad key of the provider's
// is reported, other providers' keys pass.
func TestCheckSettings(t *testing.T) {
	m, _ := bedrock.NewWithConfig("amazon.nova-lite-v1:0", bedrock.Config{AWS: awsConfig()})
	sc := m.(interface {
		CheckSettings(map[string]any, []string, bool) error
	})
	err := sc.CheckSettings(map[string]any{"region": 3, "max_tokens": 0, "seed": 4, "top_k": 40}, nil, false)
	if err == nil || !strings.Contains(err.Error(), "model_settings.region") || !strings.Contains(err.Error(), "model_settings.max_tokens") ||
		strings.Contains(err.Error(), "seed") {
		t.Errorf("CheckSettings: %v", err)
	}
	if err := sc.CheckSettings(map[string]any{"region": "eu-central-1", "max_tokens": 100}, nil, false); err != nil {
		t.Errorf("good settings: %v", err)
	}
}
