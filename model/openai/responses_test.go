package openai_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/model/openai"
)

// builtin_tools web_search and code_execution go through the Responses
// API (POST /responses): the request carries them beside the function
// tools and the conversation as input items (function calls and their
// outputs by call_id), stores nothing, and the web search calls come back
// as ServerToolUses beside the answer's text or function calls.
func TestServerToolsThroughResponsesAPI(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	var bodies []map[string]any
	answers := []string{
		`{"id":"resp_1","object":"response","status":"completed","output":[
			{"type":"web_search_call","id":"ws_1","status":"completed","action":{"type":"search","query":"svc runtime"}},
			{"type":"function_call","id":"fc_1","call_id":"call_abc","name":"lookup","arguments":"{\"word\":\"svc\"}","status":"completed"}],
		  "usage":{"input_tokens":120,"output_tokens":30,"total_tokens":150,"input_tokens_details":{"cached_tokens":100}}}`,
		`{"id":"resp_2","object":"response","status":"completed","output":[
			{"type":"code_interpreter_call","id":"ci_1","status":"completed","code":"print(6*7)","outputs":[{"type":"logs","logs":"42"}]},
			{"type":"message","id":"msg_1","role":"assistant","status":"completed","content":[{"type":"output_text","text":"svc runs agents; 6*7 is 42.","annotations":[]}]}],
		  "usage":{"input_tokens":200,"output_tokens":20,"total_tokens":220}}`,
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		mu.Lock()
		n := len(bodies)
		paths, bodies = append(paths, r.URL.Path), append(bodies, body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answers[min(n, len(answers)-1)])
	}))
	t.Cleanup(srv.Close)
	m, err := openai.NewWithConfig("gpt-4.1", openai.Config{BaseURL: srv.URL + "/v1", APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.(model.ServerToolModel).ServerTools(); strings.Join(got, ",") != "web_search,code_execution" {
		t.Errorf("ServerTools() = %v", got)
	}
	req := svc.ModelRequest{
		Instructions: "Be brief.",
		Messages:     []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"what is svc?"`)}},
		Tools:        []svc.ToolSpec{{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object","properties":{"word":{"type":"string"}}}`)}},
		ServerTools:  []string{"web_search", "code_execution"},
		Settings:     map[string]any{"max_tokens": 500, "temperature": 0.1},
		OnDelta:      func(string) {}, // the Responses path answers at once
	}
	resp, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if paths[0] != "/v1/responses" {
		t.Errorf("called %s; want /v1/responses", paths[0])
	}
	b := bodies[0]
	tools := fmt.Sprint(b["tools"])
	if !strings.Contains(tools, "type:web_search") || !strings.Contains(tools, "type:code_interpreter") || !strings.Contains(tools, "name:lookup") {
		t.Errorf("tools %s", tools)
	}
	if b["store"] != false || b["instructions"] != "Be brief." || b["max_output_tokens"] != 500.0 || b["temperature"] != 0.1 {
		t.Errorf("request %v", b)
	}
	if len(resp.ToolCalls) != 1 || resp.ToolCalls[0].ID != "call_abc" || string(resp.ToolCalls[0].Arguments) != `{"word":"svc"}` {
		t.Fatalf("tool calls %+v", resp.ToolCalls)
	}
	if len(resp.ServerToolUses) != 1 || resp.ServerToolUses[0].Name != "web_search" || !strings.Contains(string(resp.ServerToolUses[0].Input), "svc runtime") {
		t.Errorf("server tool uses %+v", resp.ServerToolUses)
	}
	if resp.InputTokens != 120 || resp.CachedInputTokens != 100 || resp.OutputTokens != 30 {
		t.Errorf("usage %d (%d cached) / %d", resp.InputTokens, resp.CachedInputTokens, resp.OutputTokens)
	}

	req.Messages = append(req.Messages,
		svc.Message{Role: svc.RoleAssistant, ToolCalls: resp.ToolCalls},
		svc.Message{Role: svc.RoleTool, ToolCallID: "call_abc", Content: json.RawMessage(`{"meaning":"a runtime"}`)})
	resp, err = m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Output) != `"svc runs agents; 6*7 is 42."` || len(resp.ServerToolUses) != 1 || resp.ServerToolUses[0].Name != "code_execution" {
		t.Errorf("answer %s, uses %+v", resp.Output, resp.ServerToolUses)
	}
	input, _ := bodies[1]["input"].([]any)
	if len(input) != 3 {
		t.Fatalf("input items %v", input)
	}
	call, out := input[1].(map[string]any), input[2].(map[string]any)
	if call["type"] != "function_call" || call["call_id"] != "call_abc" || out["type"] != "function_call_output" || out["call_id"] != "call_abc" ||
		out["output"] != `{"meaning":"a runtime"}` {
		t.Errorf("the call and its output as sent: %v, %v", call, out)
	}

	// A preset has no Responses API tools.
	p := openai.Presets[0]
	t.Setenv(p.KeyEnv, "k")
	pm, _ := p.New("llama")
	if got := pm.(model.ServerToolModel).ServerTools(); len(got) != 0 {
		t.Errorf("%s offers %v", p.Name, got)
	}
}
