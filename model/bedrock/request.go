package bedrock

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/document"
	"github.com/aws/aws-sdk-go-v2/service/bedrockruntime/types"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// buildInput maps a request to a Converse input.
func buildInput(name string, req *svc.ModelRequest, s *settings) (*bedrockruntime.ConverseInput, error) {
	in := &bedrockruntime.ConverseInput{ModelId: aws.String(name)}
	if s.maxTokens != nil || s.temperature != nil || s.topP != nil || len(s.stop) > 0 {
		in.InferenceConfig = &types.InferenceConfiguration{MaxTokens: s.maxTokens, Temperature: s.temperature, TopP: s.topP, StopSequences: s.stop}
	}
	system := req.Instructions
	if !isEmpty(req.OutputSchema) {
		system = strings.TrimSpace(system + "\n\nAnswer with only a JSON value that meets this JSON Schema:\n" + string(req.OutputSchema))
	}
	if system != "" {
		in.System = []types.SystemContentBlock{&types.SystemContentBlockMemberText{Value: system}}
	}
	if len(req.Tools) > 0 {
		tc := &types.ToolConfiguration{}
		for _, t := range req.Tools {
			schema := map[string]any{"type": "object"}
			if !isEmpty(t.InputSchema) {
				if err := json.Unmarshal(t.InputSchema, &schema); err != nil {
					return nil, fmt.Errorf("tool %s: input schema is not a JSON object", t.Name)
				}
			}
			spec := types.ToolSpecification{Name: aws.String(t.Name), InputSchema: &types.ToolInputSchemaMemberJson{Value: document.NewLazyDocument(schema)}}
			if t.Description != "" {
				spec.Description = aws.String(t.Description)
			}
			tc.Tools = append(tc.Tools, &types.ToolMemberToolSpec{Value: spec})
		}
		in.ToolConfig = tc
	}
	for i, m := range req.Messages {
		switch m.Role {
		case svc.RoleUser:
			in.Messages = append(in.Messages, types.Message{Role: types.ConversationRoleUser,
				Content: []types.ContentBlock{&types.ContentBlockMemberText{Value: text(m.Content)}}})
		case svc.RoleAssistant:
			msg := types.Message{Role: types.ConversationRoleAssistant}
			if t := text(m.Content); t != "" || len(m.ToolCalls) == 0 {
				msg.Content = append(msg.Content, &types.ContentBlockMemberText{Value: t})
			}
			for _, tc := range m.ToolCalls {
				args := map[string]any{}
				if !isEmpty(tc.Arguments) {
					if err := json.Unmarshal(tc.Arguments, &args); err != nil {
						return nil, fmt.Errorf("message %d: tool call %s: arguments are not a JSON object", i, tc.Name)
					}
				}
				msg.Content = append(msg.Content, &types.ContentBlockMemberToolUse{Value: types.ToolUseBlock{
					ToolUseId: aws.String(tc.ID), Name: aws.String(tc.Name), Input: document.NewLazyDocument(args)}})
			}
			in.Messages = append(in.Messages, msg)
		case svc.RoleTool:
			res := types.ToolResultBlock{ToolUseId: aws.String(m.ToolCallID)}
			var obj map[string]any
			if c := bytes.TrimSpace(m.Content); len(c) > 0 && c[0] == '{' && json.Unmarshal(c, &obj) == nil {
				res.Content = []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberJson{Value: document.NewLazyDocument(obj)}}
			} else {
				res.Content = []types.ToolResultContentBlock{&types.ToolResultContentBlockMemberText{Value: text(m.Content)}}
			}
			if m.IsError {
				res.Status = types.ToolResultStatusError
			}
			block := &types.ContentBlockMemberToolResult{Value: res}
			// One turn's results go in one user message: Converse wants
			// the roles to alternate.
			if n := len(in.Messages); n > 0 && in.Messages[n-1].Role == types.ConversationRoleUser && isToolResults(in.Messages[n-1]) {
				in.Messages[n-1].Content = append(in.Messages[n-1].Content, block)
			} else {
				in.Messages = append(in.Messages, types.Message{Role: types.ConversationRoleUser, Content: []types.ContentBlock{block}})
			}
		default:
			return nil, fmt.Errorf("message %d: unsupported role %q", i, m.Role)
		}
	}
	return in, nil
}

func isToolResults(m types.Message) bool {
	for _, c := range m.Content {
		if _, ok := c.(*types.ContentBlockMemberToolResult); !ok {
			return false
		}
	}
	return len(m.Content) > 0
}

// readOutput reads a Converse answer.
func readOutput(name string, out *bedrockruntime.ConverseOutput) (svc.ModelResponse, error) {
	msg, ok := out.Output.(*types.ConverseOutputMemberMessage)
	if !ok {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: 200, Class: model.ClassServer,
			Message: "malformed response: no message"}
	}
	var a assembled
	for _, c := range msg.Value.Content {
		switch b := c.(type) {
		case *types.ContentBlockMemberText:
			a.text.WriteString(b.Value)
		case *types.ContentBlockMemberToolUse:
			args := []byte("{}")
			if b.Value.Input != nil {
				raw, err := b.Value.Input.MarshalSmithyDocument()
				if err != nil {
					return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: 200, Class: model.ClassServer,
						Message: "malformed response: tool use input: " + err.Error()}
				}
				args = raw
			}
			a.calls = append(a.calls, svc.ToolCall{ID: aws.ToString(b.Value.ToolUseId), Name: aws.ToString(b.Value.Name), Arguments: compact(args)})
		}
	}
	a.usage = out.Usage
	return a.response(), nil
}

// assembled is an answer read from a Converse output or a stream's events.
type assembled struct {
	text  strings.Builder
	calls []svc.ToolCall
	usage *types.TokenUsage
}

func (a *assembled) response() svc.ModelResponse {
	var r svc.ModelResponse
	if u := a.usage; u != nil {
		cached := int64(aws.ToInt32(u.CacheReadInputTokens))
		r.InputTokens = int64(aws.ToInt32(u.InputTokens)) + cached + int64(aws.ToInt32(u.CacheWriteInputTokens))
		r.OutputTokens = int64(aws.ToInt32(u.OutputTokens))
		r.CachedInputTokens = cached
	}
	for i := range a.calls {
		if a.calls[i].ID == "" {
			a.calls[i].ID = fmt.Sprintf("call_%d", i)
		}
	}
	t := a.text.String()
	if len(a.calls) > 0 {
		r.ToolCalls = a.calls
		if t != "" {
			r.Output = jsonString(t)
		}
		return r
	}
	if c := strings.TrimSpace(t); len(c) > 0 && (c[0] == '{' || c[0] == '[') && json.Valid([]byte(c)) {
		// The answer the output schema asked for (or any JSON text,
		// which a schema-less agent takes as the same JSON value).
		r.Output = compact([]byte(c))
		return r
	}
	r.Output = jsonString(t)
	return r
}

func compact(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

func isEmpty(content json.RawMessage) bool {
	c := bytes.TrimSpace(content)
	return len(c) == 0 || bytes.Equal(c, []byte("null"))
}

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

func jsonString(s string) json.RawMessage {
	b, _ := json.Marshal(s)
	return b
}
