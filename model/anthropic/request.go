package anthropic

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/packages/param"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// FinalAnswerTool is the name of the tool that carries a structured answer
// (structured_output "tool"). If an agent has a tool of that name, the
// answer tool gets underscores appended until its name is unique.
const FinalAnswerTool = "final_answer"

const finalAnswerDescription = "Give your final answer. Call this tool exactly once, when you are done, " +
	"with the complete answer as its input; it must match the input schema."

// wrapKey holds the answer of an output schema whose root is not an
// object: tool inputs and native structured outputs must be objects.
const wrapKey = "value"

// built is a request ready to send, with what reading its answer needs.
type built struct {
	params anthropic.MessageNewParams
	// structured is "", StructuredTool or StructuredNative.
	structured string
	finalTool  string // the answer tool's name, for StructuredTool
	wrapped    bool   // the answer is under wrapKey
	// betas are the anthropic-beta flags the request's server tools need.
	betas []string
}

func buildRequest(name string, req *svc.ModelRequest, s *settings) (*built, error) {
	b := &built{}
	p := &b.params
	p.Model = anthropic.Model(name)
	p.MaxTokens = s.maxTokens
	if req.Instructions != "" {
		p.System = []anthropic.TextBlockParam{{Text: req.Instructions}}
	}
	if s.temperature != nil {
		p.Temperature = param.NewOpt(*s.temperature)
	}
	if s.topP != nil {
		p.TopP = param.NewOpt(*s.topP)
	}
	if s.topK != nil {
		p.TopK = param.NewOpt(*s.topK)
	}
	p.StopSequences = s.stop

	msgs, err := messages(req.Messages)
	if err != nil {
		return nil, err
	}
	p.Messages = msgs

	for _, t := range req.Tools {
		schema, err := objectSchema(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %s: input schema: %w", t.Name, err)
		}
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: schema}
		if t.Description != "" {
			tool.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}

	for _, name := range req.ServerTools {
		tool, beta, ok := serverTool(name)
		if !ok {
			return nil, fmt.Errorf("server tool %s: the Messages API has none (it has %s)", name, strings.Join(model.ServerTools, ", "))
		}
		p.Tools = append(p.Tools, tool)
		if beta != "" {
			b.betas = append(b.betas, beta)
		}
	}

	extra := s.extra
	if len(req.OutputSchema) > 0 {
		if extra, err = b.structuredOutput(req, s); err != nil {
			return nil, err
		}
	}
	if s.promptCache {
		// One breakpoint after the system prompt and one after the tools:
		// what stays the same from call to call of an agent is cached,
		// the conversation after it is not.
		if n := len(p.System); n > 0 {
			p.System[n-1].CacheControl = anthropic.NewCacheControlEphemeralParam()
		}
		if n := len(p.Tools); n > 0 && p.Tools[n-1].OfTool != nil {
			p.Tools[n-1].OfTool.CacheControl = anthropic.NewCacheControlEphemeralParam()
		}
	}
	if len(extra) > 0 {
		p.SetExtraFields(extra)
	}
	return b, nil
}

// structuredOutput sets up the answer per the output schema and returns
// the pass-through settings to send, adjusted to it.
func (b *built) structuredOutput(req *svc.ModelRequest, s *settings) (map[string]any, error) {
	p := &b.params
	var schema map[string]any
	if err := json.Unmarshal(req.OutputSchema, &schema); err != nil {
		return nil, fmt.Errorf("output schema: want a JSON object: %w", err)
	}
	if !isObjectSchema(schema) {
		schema = map[string]any{
			"type":                 "object",
			"properties":           map[string]any{wrapKey: schema},
			"required":             []string{wrapKey},
			"additionalProperties": false,
		}
		b.wrapped = true
	} else if _, ok := schema["type"]; !ok {
		schema["type"] = "object"
	}
	b.structured = s.structured
	extra := s.extra

	if s.structured == StructuredNative {
		// The SDK's transformation to the schema subset the API supports
		// (additionalProperties false, oneOf as anyOf, ...) is public only
		// through its beta helper; the result is plain JSON Schema.
		if t, ok := anthropic.BetaJSONSchemaOutputFormat(schema).Schema.(map[string]any); ok && t != nil {
			schema = t
		}
		format := anthropic.JSONOutputFormatParam{Schema: schema}
		if oc, ok := extra["output_config"].(map[string]any); ok {
			// A passed-through output_config (effort, say) would replace
			// ours whole: add the format to it instead.
			oc = maps.Clone(oc)
			oc["format"] = format
			extra = maps.Clone(extra)
			extra["output_config"] = oc
		} else {
			p.OutputConfig.Format = format
		}
		return extra, nil
	}

	b.finalTool = FinalAnswerTool
	for slices.ContainsFunc(req.Tools, func(t svc.ToolSpec) bool { return t.Name == b.finalTool }) {
		b.finalTool += "_"
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("output schema: %w", err)
	}
	tool := anthropic.ToolParam{
		Name:        b.finalTool,
		Description: param.NewOpt(finalAnswerDescription),
		InputSchema: param.Override[anthropic.ToolInputSchemaParam](json.RawMessage(raw)),
	}
	p.Tools = append(p.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	if len(req.Tools) == 0 {
		p.ToolChoice = anthropic.ToolChoiceParamOfTool(b.finalTool)
	} else {
		// The model may call its tools first; it must end with the answer.
		p.ToolChoice = anthropic.ToolChoiceUnionParam{OfAny: &anthropic.ToolChoiceAnyParam{}}
	}
	return extra, nil
}

// isObjectSchema reports whether a schema's root is an object, so that it
// can serve as a tool's input schema as it is.
func isObjectSchema(s map[string]any) bool {
	t, ok := s["type"]
	if !ok {
		_, props := s["properties"]
		return props
	}
	return t == "object"
}

// objectSchema is a tool's input schema sent as given, with the
// "type": "object" the API requires added when it is missing.
func objectSchema(raw json.RawMessage) (anthropic.ToolInputSchemaParam, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage(`{"type":"object"}`)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return anthropic.ToolInputSchemaParam{}, errors.New("want a JSON object")
	}
	if _, ok := top["type"]; !ok {
		rest := bytes.TrimSpace(raw[1:])
		if len(rest) > 0 && rest[0] != '}' {
			raw = append([]byte(`{"type":"object",`), rest...)
		} else {
			raw = []byte(`{"type":"object"}`)
		}
	}
	return param.Override[anthropic.ToolInputSchemaParam](json.RawMessage(raw)), nil
}

// messages converts the conversation. Turns of one role in a row become
// one message: the API wants the results of one turn's tool calls in a
// single user message.
func messages(in []svc.Message) ([]anthropic.MessageParam, error) {
	out := make([]anthropic.MessageParam, 0, len(in))
	for i, m := range in {
		var role anthropic.MessageParamRole
		var blocks []anthropic.ContentBlockParamUnion
		switch m.Role {
		case svc.RoleUser:
			role = anthropic.MessageParamRoleUser
			if t, ok := text(m.Content); ok {
				blocks = append(blocks, anthropic.NewTextBlock(t))
			}
		case svc.RoleAssistant:
			role = anthropic.MessageParamRoleAssistant
			if t, ok := text(m.Content); ok {
				blocks = append(blocks, anthropic.NewTextBlock(t))
			}
			for _, c := range m.ToolCalls {
				args := json.RawMessage(bytes.TrimSpace(c.Arguments))
				if len(args) == 0 || string(args) == "null" {
					args = json.RawMessage("{}")
				}
				if !json.Valid(args) {
					return nil, fmt.Errorf("message %d: tool call %s (%s): arguments are not JSON", i, c.ID, c.Name)
				}
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, args, c.Name))
			}
		case svc.RoleTool:
			role = anthropic.MessageParamRoleUser
			r := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if t, ok := text(m.Content); ok {
				r.Content = []anthropic.ToolResultBlockParamContentUnion{{OfText: &anthropic.TextBlockParam{Text: t}}}
			}
			if m.IsError {
				r.IsError = param.NewOpt(true)
			}
			blocks = append(blocks, anthropic.ContentBlockParamUnion{OfToolResult: &r})
		default:
			return nil, fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
		if len(blocks) == 0 {
			// The API rejects empty messages; an empty turn says nothing.
			continue
		}
		if n := len(out); n > 0 && out[n-1].Role == role {
			out[n-1].Content = append(out[n-1].Content, blocks...)
			continue
		}
		out = append(out, anthropic.MessageParam{Role: role, Content: blocks})
	}
	return out, nil
}

// text is a message content as the model reads it: a JSON string's text,
// any other JSON value's JSON text. It is false for no content or a blank
// string, which the API does not accept as a text block.
func text(c json.RawMessage) (string, bool) {
	c = bytes.TrimSpace(c)
	if len(c) == 0 {
		return "", false
	}
	if c[0] == '"' {
		var s string
		if err := json.Unmarshal(c, &s); err == nil {
			return s, strings.TrimSpace(s) != ""
		}
	}
	return string(c), true
}

// serverTool is the Messages API's server tool for a builtin_tools name,
// and the anthropic-beta flag it was introduced under (sent, in case the
// account's API still wants it; the API ignores a flag it no longer
// needs).
func serverTool(name string) (anthropic.ToolUnionParam, string, bool) {
	switch name {
	case "web_search":
		return anthropic.ToolUnionParam{OfWebSearchTool20250305: &anthropic.WebSearchTool20250305Param{}}, "", true
	case "web_fetch":
		return anthropic.ToolUnionParam{OfWebFetchTool20250910: &anthropic.WebFetchTool20250910Param{}}, "web-fetch-2025-09-10", true
	case "code_execution":
		return anthropic.ToolUnionParam{OfCodeExecutionTool20250825: &anthropic.CodeExecutionTool20250825Param{}}, "code-execution-2025-08-25", true
	}
	return anthropic.ToolUnionParam{}, "", false
}

// ServerTools are the server tools the provider offers: builtin_tools
// web_search (web_search_20250305), web_fetch (web_fetch_20250910) and
// code_execution (code_execution_20250825).
func (m *anthropicModel) ServerTools() []string { return model.ServerTools }

// response reads the API's answer.
func (b *built) response(name string, msg *anthropic.Message, res *http.Response) (svc.ModelResponse, error) {
	if msg == nil || !msg.JSON.Content.Valid() {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: status(res),
			Class: model.ClassServer, Message: "malformed response: no content"}
	}
	u := msg.Usage
	resp := svc.ModelResponse{
		// Cached input is input too; counting it keeps the tokens of a call
		// comparable across providers (OpenAI's prompt_tokens include it).
		InputTokens:       u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		OutputTokens:      u.OutputTokens,
		CachedInputTokens: u.CacheReadInputTokens,
	}
	var sb strings.Builder
	var answer json.RawMessage
	for _, c := range msg.Content {
		switch c.Type {
		case "text":
			sb.WriteString(c.Text)
		case "tool_use":
			if c.Name == "" {
				return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: status(res),
					Class: model.ClassServer, Message: "malformed response: a tool_use block without a name"}
			}
			input := json.RawMessage(bytes.TrimSpace(c.Input))
			if len(input) == 0 || string(input) == "null" {
				input = json.RawMessage("{}")
			}
			input = append(json.RawMessage(nil), input...)
			if b.finalTool != "" && c.Name == b.finalTool {
				answer = input
				continue
			}
			resp.ToolCalls = append(resp.ToolCalls, svc.ToolCall{ID: c.ID, Name: c.Name, Arguments: input})
		case "server_tool_use":
			resp.ServerToolUses = append(resp.ServerToolUses, svc.ServerToolUse{ID: c.ID, Name: c.Name,
				Input: append(json.RawMessage(nil), bytes.TrimSpace(c.Input)...)})
		default:
			// A server tool's result (web_search_tool_result, ...) goes
			// with its use; thinking blocks are not part of the answer.
			if strings.HasSuffix(c.Type, "_tool_result") && c.ToolUseID != "" {
				for i := range resp.ServerToolUses {
					if resp.ServerToolUses[i].ID == c.ToolUseID {
						resp.ServerToolUses[i].Result = blockJSON(c)
					}
				}
			}
		}
	}
	txt := sb.String()

	switch {
	case answer != nil:
		// The model gave its answer: calls made alongside it are dropped.
		resp.ToolCalls = nil
		resp.Output = b.unwrap(answer)
	case len(resp.ToolCalls) > 0:
		// Text next to tool calls is the model's note on them; it goes
		// back to the model with the calls in the next turn.
		if txt != "" {
			resp.Output = jsonString(txt)
		}
	case b.structured != "":
		// A JSON answer in text (native mode, or a model that answered
		// without the answer tool): the caller validates it.
		if t := strings.TrimSpace(txt); t != "" && json.Valid([]byte(t)) {
			resp.Output = b.unwrap(json.RawMessage(t))
		} else {
			resp.Output = jsonString(txt)
		}
	default:
		resp.Output = jsonString(txt)
	}
	return resp, nil
}

// blockJSON is a content block as the API sent it (or, for a block
// assembled from a stream, as the SDK marshals it).
func blockJSON(c anthropic.ContentBlockUnion) json.RawMessage {
	if raw := c.RawJSON(); raw != "" {
		return json.RawMessage(raw)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return nil
	}
	return b
}

// unwrap takes the answer out of its wrapKey object, when it was wrapped.
func (b *built) unwrap(v json.RawMessage) json.RawMessage {
	if !b.wrapped {
		return v
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(v, &obj); err == nil {
		if inner, ok := obj[wrapKey]; ok {
			return inner
		}
	}
	return v
}

func status(res *http.Response) int {
	if res == nil {
		return 0
	}
	return res.StatusCode
}

func jsonString(s string) json.RawMessage {
	out, _ := json.Marshal(s)
	return out
}
