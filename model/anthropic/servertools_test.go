package anthropic

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// searchTurn is a Messages API answer in which the model searched the
// web (Anthropic's server tool) and answered from the results; stop is
// its stop_reason.
func searchTurn(id, query, stop, text string) string {
	return fmt.Sprintf(`{"id":"msg_%[1]s","type":"message","role":"assistant","model":"claude-test","content":[
		{"type":"server_tool_use","id":"srvtoolu_%[1]s","name":"web_search","input":{"query":%[2]q}},
		{"type":"web_search_tool_result","tool_use_id":"srvtoolu_%[1]s","content":[
			{"type":"web_search_result","url":"https://example.com/%[1]s","title":"Result %[1]s","encrypted_content":"enc","page_age":null}]},
		{"type":"text","text":%[4]q,"citations":[{"type":"web_search_result_location","url":"https://example.com/%[1]s","title":"Result %[1]s","encrypted_index":"x","cited_text":"c"}]}],
		"stop_reason":%[3]q,"stop_sequence":null,
		"usage":{"input_tokens":100,"output_tokens":20,"server_tool_use":{"web_search_requests":1}}}`, id, query, stop, text)
}

// builtin_tools web_search, web_fetch and code_execution reach the
// Messages API as its server tools (with the beta flags of the ones that
// had them), and the searches the provider ran come back with their
// result blocks beside the answer, which is the model's text.
func TestServerToolsOnTheWire(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, searchTurn("1", "svc agent runtime", "end_turn", "svc runs agents."))
	})
	m := f.model(t, Config{})
	if got := m.(model.ServerToolModel).ServerTools(); strings.Join(got, ",") != "web_search,web_fetch,code_execution" {
		t.Errorf("ServerTools() = %v", got)
	}
	resp, err := m.Generate(t.Context(), svc.ModelRequest{
		Messages:    []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"what is svc?"`)}},
		Tools:       []svc.ToolSpec{{Name: "lookup", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		ServerTools: []string{"web_search", "web_fetch", "code_execution"},
	})
	if err != nil {
		t.Fatal(err)
	}
	req := f.requests()[0]
	var types []string
	for _, tool := range req.body["tools"].([]any) {
		tm := tool.(map[string]any)
		types = append(types, fmt.Sprint(tm["type"], "/", tm["name"]))
	}
	if strings.Join(types, " ") != "<nil>/lookup web_search_20250305/web_search web_fetch_20250910/web_fetch code_execution_20250825/code_execution" {
		t.Errorf("tools sent: %v", types)
	}
	if b := req.header.Get("anthropic-beta"); !strings.Contains(b, "web-fetch-2025-09-10") || !strings.Contains(b, "code-execution-2025-08-25") {
		t.Errorf("anthropic-beta %q", b)
	}
	if string(resp.Output) != `"svc runs agents."` || len(resp.ToolCalls) != 0 {
		t.Errorf("answer %s, calls %v; want the text and no tool calls for svc to run", resp.Output, resp.ToolCalls)
	}
	if len(resp.ServerToolUses) != 1 {
		t.Fatalf("server tool uses %+v; want the search", resp.ServerToolUses)
	}
	u := resp.ServerToolUses[0]
	var result struct {
		Type    string `json:"type"`
		Content []struct {
			URL string `json:"url"`
		} `json:"content"`
	}
	_ = json.Unmarshal(u.Result, &result)
	if u.Name != "web_search" || string(u.Input) != `{"query":"svc agent runtime"}` || result.Type != "web_search_tool_result" ||
		len(result.Content) != 1 || result.Content[0].URL != "https://example.com/1" {
		t.Errorf("server tool use %s %s -> %s", u.Name, u.Input, u.Result)
	}

	// Without builtin server tools, none is sent.
	if _, err := m.Generate(t.Context(), svc.ModelRequest{Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"x"`)}}}); err != nil {
		t.Fatal(err)
	}
	if tools, ok := f.requests()[1].body["tools"]; ok {
		t.Errorf("tools %v sent without any", tools)
	}
}

// A turn that pauses (pause_turn, a long run of server tool uses) is
// continued by sending its content back as the assistant's message; the
// answer is the whole turn's text, its searches and its usage.
func TestServerToolPauseTurnIsContinued(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		if n == 1 {
			fmt.Fprint(w, searchTurn("1", "first", "pause_turn", "Searching more. "))
			return
		}
		fmt.Fprint(w, searchTurn("2", "second", "end_turn", "Done."))
	})
	m := f.model(t, Config{})
	resp, err := m.Generate(t.Context(), svc.ModelRequest{
		Messages:    []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"research svc"`)}},
		ServerTools: []string{"web_search"},
	})
	if err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d calls; want the paused turn continued once", len(reqs))
	}
	msgs := reqs[1].body["messages"].([]any)
	last := msgs[len(msgs)-1].(map[string]any)
	content, _ := last["content"].([]any)
	if last["role"] != "assistant" || len(content) != 3 || content[0].(map[string]any)["type"] != "server_tool_use" ||
		content[1].(map[string]any)["type"] != "web_search_tool_result" {
		t.Errorf("the continuation's last message: %v; want the paused turn's blocks as sent", last)
	}
	if string(resp.Output) != `"Searching more. Done."` || len(resp.ServerToolUses) != 2 || resp.InputTokens != 200 || resp.OutputTokens != 40 {
		t.Errorf("answer %s, %d searches, %d/%d tokens; want the whole turn", resp.Output, len(resp.ServerToolUses), resp.InputTokens, resp.OutputTokens)
	}
}

// A name the Messages API has no server tool for is refused before any
// request.
func TestUnknownServerTool(t *testing.T) {
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, n int) { reply(w, `[{"type":"text","text":"x"}]`, "") })
	_, err := f.model(t, Config{}).Generate(t.Context(), svc.ModelRequest{
		Messages: []svc.Message{{Role: svc.RoleUser, Content: json.RawMessage(`"x"`)}}, ServerTools: []string{"crystal_ball"}})
	if err == nil || len(f.requests()) != 0 {
		t.Errorf("%v after %d requests; want a refusal before any", err, len(f.requests()))
	}
}
