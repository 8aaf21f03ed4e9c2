package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/param"
	"github.com/openai/openai-go/v3/responses"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// The OpenAI and Azure OpenAI built-in tools, which only the Responses API
// offers: a call with ServerTools is made there (POST /responses) instead
// of to Chat Completions. It answers at once, never streamed (OnDelta is
// ignored), and stores nothing at OpenAI (store: false).

// ServerTools are the server tools the provider offers through the
// Responses API: builtin_tools web_search (web_search) and code_execution
// (code_interpreter, in an automatic container). Azure OpenAI's Responses
// API has code_interpreter and no web search; the presets offer none:
// their services have no Responses API with these tools.
func (m *chatModel) ServerTools() []string {
	switch m.provider {
	case Provider:
		return []string{"web_search", "code_execution"}
	case AzureProvider:
		return []string{"code_execution"}
	}
	return nil
}

// responsesTool is the Responses API tool of a builtin_tools name.
func responsesTool(name string) (responses.ToolUnionParam, bool) {
	switch name {
	case "web_search":
		return responses.ToolUnionParam{OfWebSearch: &responses.WebSearchToolParam{Type: responses.WebSearchToolTypeWebSearch}}, true
	case "code_execution":
		return responses.ToolUnionParam{OfCodeInterpreter: &responses.ToolCodeInterpreterParam{
			Container: responses.ToolCodeInterpreterContainerUnionParam{
				OfCodeInterpreterToolAuto: &responses.ToolCodeInterpreterContainerCodeInterpreterContainerAutoParam{}}}}, true
	}
	return responses.ToolUnionParam{}, false
}

// responsesParams maps a request to Responses API parameters.
func responsesParams(name string, req *svc.ModelRequest, s *settings) (responses.ResponseNewParams, error) {
	p := responses.ResponseNewParams{Model: name, Store: param.NewOpt(false)}
	if req.Instructions != "" {
		p.Instructions = param.NewOpt(req.Instructions)
	}
	p.Temperature, p.TopP = s.temperature, s.topP
	p.MaxOutputTokens = s.maxTokens
	items := make(responses.ResponseInputParam, 0, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case svc.RoleUser:
			items = append(items, responses.ResponseInputItemParamOfMessage(text(m.Content), responses.EasyInputMessageRoleUser))
		case svc.RoleAssistant:
			if t := text(m.Content); t != "" || len(m.ToolCalls) == 0 {
				items = append(items, responses.ResponseInputItemParamOfMessage(t, responses.EasyInputMessageRoleAssistant))
			}
			for _, c := range m.ToolCalls {
				items = append(items, responses.ResponseInputItemParamOfFunctionCall(arguments(c.Arguments), c.ID, c.Name))
			}
		case svc.RoleTool:
			out := text(m.Content)
			if m.IsError {
				out = "Error: " + out
			}
			item := responses.ResponseInputItemParamOfFunctionCallOutput(out)
			item.OfFunctionCallOutput.CallID = param.NewOpt(m.ToolCallID)
			items = append(items, item)
		default:
			return p, fmt.Errorf("message %d: unsupported role %q", i, m.Role)
		}
	}
	p.Input.OfInputItemList = items
	for _, t := range req.Tools {
		fp := map[string]any{}
		for k, v := range toolParameters(t.InputSchema) {
			fp[k] = v
		}
		ft := &responses.FunctionToolParam{Name: t.Name, Parameters: fp, Strict: param.NewOpt(false)}
		if t.Description != "" {
			ft.Description = param.NewOpt(t.Description)
		}
		p.Tools = append(p.Tools, responses.ToolUnionParam{OfFunction: ft})
	}
	for _, n := range req.ServerTools {
		t, ok := responsesTool(n)
		if !ok {
			return p, fmt.Errorf("server tool %s: the Responses API has none here (it has web_search, code_execution)", n)
		}
		p.Tools = append(p.Tools, t)
	}
	if len(s.extra) > 0 {
		p.SetExtraFields(s.extra)
	}
	return p, nil
}

// generateResponses makes the call through the Responses API.
func (m *chatModel) generateResponses(ctx, callCtx context.Context, name, key string, base *url.URL, req *svc.ModelRequest,
	s *settings, structured bool) (resp svc.ModelResponse, err error) {
	p, err := responsesParams(name, req, s)
	if err != nil {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Class: model.ClassInvalid, Message: err.Error()}
	}
	var (
		httpResp *http.Response
		raw      []byte
	)
	defer func() { resp, err = withHint(resp, err, httpResp) }()
	opts := append(m.auth(base, key), option.WithResponseInto(&httpResp), option.WithResponseBodyInto(&raw))
	if s.maxRetries >= 0 {
		opts = append(opts, option.WithMaxRetries(s.maxRetries))
	}
	if _, err := m.responses.New(callCtx, p, opts...); err != nil {
		return svc.ModelResponse{}, callError(ctx, name, err, httpResp)
	}
	status := 0
	if httpResp != nil {
		status = httpResp.StatusCode
	}
	return decodeResponses(name, status, raw, structured)
}

// wireResponse is a Responses API answer as this provider reads it.
type wireResponse struct {
	Status string            `json:"status"`
	Output []json.RawMessage `json:"output"`
	Error  json.RawMessage   `json:"error"`
	Usage  struct {
		InputTokens        tokenCount `json:"input_tokens"`
		OutputTokens       tokenCount `json:"output_tokens"`
		TotalTokens        tokenCount `json:"total_tokens"`
		InputTokensDetails struct {
			CachedTokens tokenCount `json:"cached_tokens"`
		} `json:"input_tokens_details"`
	} `json:"usage"`
}

// decodeResponses reads a Responses API answer: its message text, its
// function calls, and its built-in tool calls (web_search_call,
// code_interpreter_call) as ServerToolUses.
func decodeResponses(name string, status int, raw []byte, structured bool) (svc.ModelResponse, error) {
	malformed := func(format string, args ...any) (svc.ModelResponse, error) {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: status, Class: model.ClassServer,
			Message: "malformed response: " + fmt.Sprintf(format, args...)}
	}
	var w wireResponse
	if err := json.Unmarshal(raw, &w); err != nil {
		return malformed("%v (body starts %q)", err, clip(string(bytes.TrimSpace(raw[:min(len(raw), 80)]))))
	}
	if w.Status == "failed" {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: status, Class: model.ClassServer,
			Message: cmpOr(errorText(w.Error), "the response failed")}
	}
	resp := svc.ModelResponse{
		InputTokens: int64(w.Usage.InputTokens), OutputTokens: int64(w.Usage.OutputTokens), TokensUsed: int64(w.Usage.TotalTokens),
		CachedInputTokens: min(int64(w.Usage.InputTokensDetails.CachedTokens), int64(w.Usage.InputTokens)),
	}
	var sb strings.Builder
	for i, item := range w.Output {
		var it struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			CallID    string `json:"call_id"`
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
			Content   []struct {
				Type    string `json:"type"`
				Text    string `json:"text"`
				Refusal string `json:"refusal"`
			} `json:"content"`
			Action json.RawMessage `json:"action"`
			Code   string          `json:"code"`
		}
		if err := json.Unmarshal(item, &it); err != nil {
			return malformed("output %d: %v", i, err)
		}
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				sb.WriteString(c.Text)
				if c.Text == "" {
					sb.WriteString(c.Refusal)
				}
			}
		case "function_call":
			args := json.RawMessage(it.Arguments)
			if strings.TrimSpace(it.Arguments) == "" {
				args = json.RawMessage("{}")
			}
			if !json.Valid(args) {
				return malformed("function call %s: arguments are not JSON", it.Name)
			}
			resp.ToolCalls = append(resp.ToolCalls, svc.ToolCall{ID: cmpOr(it.CallID, it.ID, fmt.Sprintf("call_%d", i)), Name: it.Name, Arguments: compact(args)})
		case "web_search_call":
			resp.ServerToolUses = append(resp.ServerToolUses, svc.ServerToolUse{ID: it.ID, Name: "web_search", Input: it.Action, Result: compact(item)})
		case "code_interpreter_call":
			code, _ := json.Marshal(map[string]string{"code": it.Code})
			resp.ServerToolUses = append(resp.ServerToolUses, svc.ServerToolUse{ID: it.ID, Name: "code_execution", Input: code, Result: compact(item)})
		}
		// Reasoning items and others are not part of the answer.
	}
	txt := sb.String()
	switch {
	case len(resp.ToolCalls) > 0:
		if txt != "" {
			resp.Output = jsonString(txt)
		}
	case structured:
		resp.Output = structuredOutput(txt, false)
	default:
		resp.Output = jsonString(txt)
	}
	return resp, nil
}

func cmpOr(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
