package google

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"

	"google.golang.org/genai"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// madeUp prefixes the ids the provider makes up for calls the server
// sent without one; they are never sent back.
const madeUp = "gc_"

// sigSep separates a call's id from its thought signature (base64url).
const sigSep = "~"

// buildRequest maps a request to the SDK's contents and config; structured
// says the answer is to be read as JSON.
func buildRequest(req *svc.ModelRequest, s *settings) ([]*genai.Content, *genai.GenerateContentConfig, bool, error) {
	cfg := &genai.GenerateContentConfig{
		Temperature: s.temperature, TopP: s.topP, TopK: s.topK, MaxOutputTokens: s.maxTokens, Seed: s.seed,
		StopSequences: s.stop, PresencePenalty: s.presencePenalty, FrequencyPenalty: s.frequencyPenalty,
	}
	if s.thinkingBudget != nil {
		cfg.ThinkingConfig = &genai.ThinkingConfig{ThinkingBudget: s.thinkingBudget}
	}
	if req.Instructions != "" {
		cfg.SystemInstruction = &genai.Content{Parts: []*genai.Part{{Text: req.Instructions}}}
	}
	if len(req.Tools) > 0 {
		decls := make([]*genai.FunctionDeclaration, 0, len(req.Tools))
		for _, t := range req.Tools {
			d := &genai.FunctionDeclaration{Name: t.Name, Description: t.Description}
			if !isEmpty(t.InputSchema) {
				d.ParametersJsonSchema = t.InputSchema
			} else {
				d.ParametersJsonSchema = json.RawMessage(`{"type":"object"}`)
			}
			decls = append(decls, d)
		}
		cfg.Tools = []*genai.Tool{{FunctionDeclarations: decls}}
	}
	for _, name := range req.ServerTools {
		t, ok := serverTool(name)
		if !ok {
			return nil, nil, false, fmt.Errorf("server tool %s: the Gemini API has none", name)
		}
		cfg.Tools = append(cfg.Tools, t)
	}
	structured := !isEmpty(req.OutputSchema)
	if structured && len(req.Tools) == 0 && len(req.ServerTools) == 0 {
		cfg.ResponseMIMEType = "application/json"
		cfg.ResponseJsonSchema = req.OutputSchema
	}

	names := map[string]string{} // call id -> function name
	contents := make([]*genai.Content, 0, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case svc.RoleUser:
			contents = append(contents, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{{Text: text(m.Content)}}})
		case svc.RoleAssistant:
			c := &genai.Content{Role: genai.RoleModel}
			if t := text(m.Content); t != "" || len(m.ToolCalls) == 0 {
				c.Parts = append(c.Parts, &genai.Part{Text: t})
			}
			for _, tc := range m.ToolCalls {
				names[tc.ID] = tc.Name
				id, sig := splitID(tc.ID)
				var args map[string]any
				if !isEmpty(tc.Arguments) {
					if err := json.Unmarshal(tc.Arguments, &args); err != nil {
						return nil, nil, false, fmt.Errorf("message %d: tool call %s: arguments are not a JSON object", i, tc.Name)
					}
				}
				c.Parts = append(c.Parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: id, Name: tc.Name, Args: args}, ThoughtSignature: sig})
			}
			contents = append(contents, c)
		case svc.RoleTool:
			name, ok := names[m.ToolCallID]
			if !ok {
				return nil, nil, false, fmt.Errorf("message %d: tool result for unknown call %q", i, m.ToolCallID)
			}
			var v any = text(m.Content)
			if !isEmpty(m.Content) {
				_ = json.Unmarshal(m.Content, &v)
			}
			key := "result"
			if m.IsError {
				key = "error"
			}
			id, _ := splitID(m.ToolCallID)
			part := &genai.Part{FunctionResponse: &genai.FunctionResponse{ID: id, Name: name, Response: map[string]any{key: v}}}
			// Results of one turn's calls go together in one user turn.
			if n := len(contents); n > 0 && contents[n-1].Role == genai.RoleUser && contents[n-1].Parts[0].FunctionResponse != nil {
				contents[n-1].Parts = append(contents[n-1].Parts, part)
			} else {
				contents = append(contents, &genai.Content{Role: genai.RoleUser, Parts: []*genai.Part{part}})
			}
		default:
			return nil, nil, false, fmt.Errorf("message %d: unsupported role %q", i, m.Role)
		}
	}
	return contents, cfg, structured, nil
}

// serverTool is the Gemini API's tool for a builtin_tools name: grounding
// with Google Search, URL context, code execution.
func serverTool(name string) (*genai.Tool, bool) {
	switch name {
	case "web_search":
		return &genai.Tool{GoogleSearch: &genai.GoogleSearch{}}, true
	case "web_fetch":
		return &genai.Tool{URLContext: &genai.URLContext{}}, true
	case "code_execution":
		return &genai.Tool{CodeExecution: &genai.ToolCodeExecution{}}, true
	}
	return nil, false
}

// ServerTools are the server tools the provider offers: builtin_tools
// web_search (grounding with Google Search), web_fetch (URL context) and
// code_execution.
func (m *geminiModel) ServerTools() []string { return model.ServerTools }

// splitID is the server's id of a call (empty for a made-up one) and its
// thought signature.
func splitID(id string) (string, []byte) {
	id, enc, _ := strings.Cut(id, sigSep)
	var sig []byte
	if enc != "" {
		sig, _ = base64.RawURLEncoding.DecodeString(enc)
	}
	if strings.HasPrefix(id, madeUp) {
		id = ""
	}
	return id, sig
}

// callID is the id a call gets: the server's or a made-up one, with its
// thought signature.
func callID(serverID string, n int, sig []byte) string {
	id := serverID
	if id == "" || strings.Contains(id, sigSep) {
		id = fmt.Sprintf("%s%d", madeUp, n)
	}
	if len(sig) > 0 {
		id += sigSep + base64.RawURLEncoding.EncodeToString(sig)
	}
	return id
}

func isEmpty(content json.RawMessage) bool {
	c := bytes.TrimSpace(content)
	return len(c) == 0 || bytes.Equal(c, []byte("null"))
}

// text is a content value's text: a JSON string's text, or the JSON of
// any other value.
func text(content json.RawMessage) string {
	c := bytes.TrimSpace(content)
	if len(c) == 0 {
		return ""
	}
	if c[0] == '"' {
		var s string
		if json.Unmarshal(c, &s) == nil {
			return s
		}
	}
	return string(c)
}

// assembled is an answer read from one response or a stream's chunks.
type assembled struct {
	text   strings.Builder
	calls  []svc.ToolCall
	usage  *genai.GenerateContentResponseUsageMetadata
	chunks int
	// finished: a candidate said why it stopped (a stream cut short
	// never does).
	finished bool
	// code are the code executions, in order; grounding and urls the
	// last grounding and URL context metadata (a stream's last chunk
	// has them whole).
	code      []svc.ServerToolUse
	grounding *genai.GroundingMetadata
	urls      *genai.URLContextMetadata
}

// add reads a response (or a stream's chunk): its text, its calls and
// its usage (a stream's last chunk has the whole call's).
func (a *assembled) add(r *genai.GenerateContentResponse) error {
	if r == nil {
		return fmt.Errorf("no response")
	}
	a.chunks++
	if r.UsageMetadata != nil {
		a.usage = r.UsageMetadata
	}
	if len(r.Candidates) == 0 {
		if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" {
			return fmt.Errorf("prompt blocked: %s", r.PromptFeedback.BlockReason)
		}
		return nil
	}
	c := r.Candidates[0]
	if c.FinishReason != "" {
		a.finished = true
	}
	if c.GroundingMetadata != nil {
		a.grounding = c.GroundingMetadata
	}
	if c.URLContextMetadata != nil {
		a.urls = c.URLContextMetadata
	}
	if c.Content == nil {
		return nil
	}
	for _, p := range c.Content.Parts {
		switch {
		case p == nil:
		case p.FunctionCall != nil:
			args, err := json.Marshal(p.FunctionCall.Args)
			if err != nil {
				return fmt.Errorf("function call %s: %v", p.FunctionCall.Name, err)
			}
			if p.FunctionCall.Args == nil {
				args = []byte("{}")
			}
			a.calls = append(a.calls, svc.ToolCall{ID: callID(p.FunctionCall.ID, len(a.calls), p.ThoughtSignature),
				Name: p.FunctionCall.Name, Arguments: args})
		case p.ExecutableCode != nil:
			a.code = append(a.code, svc.ServerToolUse{ID: p.ExecutableCode.ID, Name: "code_execution", Input: marshal(p.ExecutableCode)})
		case p.CodeExecutionResult != nil:
			if n := len(a.code); n > 0 && a.code[n-1].Result == nil {
				a.code[n-1].Result = marshal(p.CodeExecutionResult)
			} else {
				a.code = append(a.code, svc.ServerToolUse{ID: p.CodeExecutionResult.ID, Name: "code_execution", Result: marshal(p.CodeExecutionResult)})
			}
		case p.Thought:
			// A thought summary is not the answer.
		default:
			a.text.WriteString(p.Text)
		}
	}
	return nil
}

// response is the assembled answer as a ModelResponse.
func (a *assembled) response(structured bool) (svc.ModelResponse, error) {
	if a.chunks == 0 {
		return svc.ModelResponse{}, fmt.Errorf("no response")
	}
	var r svc.ModelResponse
	if u := a.usage; u != nil {
		r.InputTokens = int64(u.PromptTokenCount)
		r.OutputTokens = int64(u.CandidatesTokenCount) + int64(u.ThoughtsTokenCount)
		r.CachedInputTokens = min(int64(u.CachedContentTokenCount), r.InputTokens)
		r.TokensUsed = int64(u.TotalTokenCount)
	}
	if g := a.grounding; g != nil && (len(g.WebSearchQueries) > 0 || len(g.GroundingChunks) > 0) {
		r.ServerToolUses = append(r.ServerToolUses, svc.ServerToolUse{Name: "web_search",
			Input: marshal(map[string]any{"queries": g.WebSearchQueries}), Result: marshal(g)})
	}
	if a.urls != nil {
		r.ServerToolUses = append(r.ServerToolUses, svc.ServerToolUse{Name: "web_fetch", Result: marshal(a.urls)})
	}
	r.ServerToolUses = append(r.ServerToolUses, a.code...)
	txt := a.text.String()
	if len(a.calls) > 0 {
		r.ToolCalls = a.calls
		if txt != "" {
			r.Output = jsonString(txt)
		}
		return r, nil
	}
	if structured {
		if t := strings.TrimSpace(txt); json.Valid([]byte(t)) {
			var buf bytes.Buffer
			_ = json.Compact(&buf, []byte(t))
			r.Output = buf.Bytes()
			return r, nil
		}
	}
	r.Output = jsonString(txt)
	return r, nil
}

func marshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return b
}

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
