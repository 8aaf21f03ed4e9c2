package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/model"
)

// The answer as this provider reads it: only the fields it uses, with
// encoding/json's strict typing, so that a body of the wrong shape is an
// error rather than a zero value that looks like an empty answer.
type (
	wireCompletion struct {
		Choices []wireChoice    `json:"choices"`
		Usage   wireUsage       `json:"usage"`
		Error   json.RawMessage `json:"error"`
	}
	wireChoice struct {
		Message *wireMessage `json:"message"`
	}
	wireMessage struct {
		// Content is a string or null, or with some servers a list of
		// content parts.
		Content   json.RawMessage `json:"content"`
		Refusal   string          `json:"refusal"`
		ToolCalls []wireToolCall  `json:"tool_calls"`
	}
	wireToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name string `json:"name"`
			// Arguments is a JSON text in a string, or with some servers
			// the JSON value itself.
			Arguments json.RawMessage `json:"arguments"`
		} `json:"function"`
		Custom struct {
			Name  string `json:"name"`
			Input string `json:"input"`
		} `json:"custom"`
	}
	wireUsage struct {
		PromptTokens        tokenCount `json:"prompt_tokens"`
		CompletionTokens    tokenCount `json:"completion_tokens"`
		TotalTokens         tokenCount `json:"total_tokens"`
		PromptTokensDetails struct {
			// CachedTokens is the part of PromptTokens read from the
			// provider's prompt cache (OpenAI: prompts of 1,024 tokens
			// or more that repeat a recent prefix).
			CachedTokens tokenCount `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
)

// tokenCount is a usage figure. Usage is bookkeeping, not the answer: a
// server that reports it oddly (a float, a string, null) costs the count,
// not the call.
type tokenCount int64

func (t *tokenCount) UnmarshalJSON(b []byte) error {
	var f float64
	if json.Unmarshal(b, &f) == nil && f >= 0 && f < 1e18 {
		*t = tokenCount(f)
		return nil
	}
	var s string
	if json.Unmarshal(b, &s) == nil {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 0 {
			*t = tokenCount(n)
		}
	}
	return nil
}

// decodeResponse reads a successful (2xx) answer.
func decodeResponse(name string, status int, raw []byte, out outputMode) (svc.ModelResponse, error) {
	malformed := func(format string, args ...any) (svc.ModelResponse, error) {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: status, Class: model.ClassServer,
			Message: "malformed response: " + fmt.Sprintf(format, args...)}
	}
	var wc wireCompletion
	if err := json.Unmarshal(raw, &wc); err != nil {
		return malformed("%v (body starts %q)", err, clip(string(bytes.TrimSpace(raw[:min(len(raw), 80)]))))
	}
	return readAnswer(name, status, &wc, out)
}

// readAnswer reads a completion decoded from a plain answer's body or
// assembled from a stream's chunks.
func readAnswer(name string, status int, wc *wireCompletion, out outputMode) (svc.ModelResponse, error) {
	malformed := func(format string, args ...any) (svc.ModelResponse, error) {
		return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: status, Class: model.ClassServer,
			Message: "malformed response: " + fmt.Sprintf(format, args...)}
	}
	if len(wc.Choices) == 0 {
		// Some proxies answer 200 with an error object.
		if msg := errorText(wc.Error); msg != "" {
			return svc.ModelResponse{}, &model.ProviderError{Provider: Provider, Model: name, Status: status, Class: model.ClassServer, Message: msg}
		}
		return malformed("no choices")
	}
	msg := wc.Choices[0].Message
	if msg == nil {
		return malformed("choice 0 has no message")
	}
	text, err := contentText(msg.Content)
	if err != nil {
		return malformed("message content: %v", err)
	}
	calls := make([]svc.ToolCall, 0, len(msg.ToolCalls))
	for i, c := range msg.ToolCalls {
		call, err := toolCall(i, c)
		if err != nil {
			return malformed("tool call %d: %v", i, err)
		}
		calls = append(calls, call)
	}

	resp := svc.ModelResponse{
		InputTokens:       int64(wc.Usage.PromptTokens),
		OutputTokens:      int64(wc.Usage.CompletionTokens),
		TokensUsed:        int64(wc.Usage.TotalTokens),
		CachedInputTokens: min(int64(wc.Usage.PromptTokensDetails.CachedTokens), int64(wc.Usage.PromptTokens)),
	}
	if len(calls) > 0 {
		resp.ToolCalls = calls
		// Text beside tool calls is the model thinking aloud; it stays in
		// the conversation as the assistant message's content.
		if text != "" {
			resp.Output = jsonString(text)
		}
		return resp, nil
	}
	if text == "" && msg.Refusal != "" {
		// A refusal is the model's answer; under an output schema it fails
		// validation and gets the agent's corrective call like any other.
		resp.Output = jsonString(msg.Refusal)
		return resp, nil
	}
	if out.structured {
		resp.Output = structuredOutput(text, out.wrapped)
	} else {
		resp.Output = jsonString(text)
	}
	return resp, nil
}

// contentText reads message content: a string, null, or a list of parts
// whose text parts are joined.
func contentText(raw json.RawMessage) (string, error) {
	if isEmpty(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("want a string or a list of parts, got %s", kindOf(raw))
	}
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

// toolCall maps the i-th tool call of an answer.
func toolCall(i int, c wireToolCall) (svc.ToolCall, error) {
	id := c.ID
	if id == "" {
		// Some compatible servers omit ids; the agent links results to
		// calls by id, so each call needs one.
		id = "call_" + strconv.Itoa(i)
	}
	switch c.Type {
	case "", "function":
		if c.Function.Name == "" {
			return svc.ToolCall{}, fmt.Errorf("no function name")
		}
		args, err := callArguments(c.Function.Arguments)
		if err != nil {
			return svc.ToolCall{}, err
		}
		return svc.ToolCall{ID: id, Name: c.Function.Name, Arguments: args}, nil
	case "custom":
		if c.Custom.Name == "" {
			return svc.ToolCall{}, fmt.Errorf("no custom tool name")
		}
		return svc.ToolCall{ID: id, Name: c.Custom.Name, Arguments: jsonString(c.Custom.Input)}, nil
	}
	return svc.ToolCall{}, fmt.Errorf("unsupported type %q", c.Type)
}

// callArguments reads a function call's arguments as a JSON value: the
// JSON text inside the string, or the value itself. Empty arguments are {}.
// Arguments that are not JSON (a model's slip) are kept as a JSON string,
// so the tool's input validation rejects them and the model sees why.
func callArguments(raw json.RawMessage) (json.RawMessage, error) {
	if isEmpty(raw) {
		return json.RawMessage(`{}`), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		// Not a string: the value itself (a JSON value, since it decoded
		// as part of the body).
		return compact([]byte(raw)), nil
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return json.RawMessage(`{}`), nil
	}
	if json.Valid([]byte(s)) {
		return compact([]byte(s)), nil
	}
	return jsonString(s), nil
}

// structuredOutput reads a final answer that should be JSON: the JSON
// value of the text (inside a ``` fence, as models without JSON mode tend
// to write it), unwrapped from {"value": ...} when the schema was wrapped.
// Text that is not JSON is returned as a JSON string: it then fails the
// output schema, and the agent's corrective call shows the model why.
func structuredOutput(text string, wrapped bool) json.RawMessage {
	candidate := strings.TrimSpace(text)
	if !json.Valid([]byte(candidate)) {
		candidate = unfence(candidate)
		if !json.Valid([]byte(candidate)) {
			return jsonString(text)
		}
	}
	v := compact([]byte(candidate))
	if wrapped {
		var obj map[string]json.RawMessage
		if json.Unmarshal(v, &obj) == nil {
			if inner, ok := obj[wrapKey]; ok {
				return inner
			}
		}
	}
	return v
}

// unfence returns the body of a ``` code block that is the whole text.
func unfence(s string) string {
	if !strings.HasPrefix(s, "```") || !strings.HasSuffix(s, "```") || len(s) < 6 {
		return s
	}
	body := s[3 : len(s)-3]
	// Drop the info string ("json") on the opening line.
	if nl := strings.IndexByte(body, '\n'); nl >= 0 {
		body = body[nl+1:]
	} else {
		return s
	}
	return strings.TrimSpace(body)
}

// errorText is the message of an "error" member: an object with a message,
// or a string.
func errorText(raw json.RawMessage) string {
	if isEmpty(raw) {
		return ""
	}
	var obj struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &obj) == nil && obj.Message != "" {
		return clip(obj.Message)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil && s != "" {
		return clip(s)
	}
	return clip(string(raw))
}

func kindOf(raw json.RawMessage) string {
	switch c := bytes.TrimSpace(raw); {
	case len(c) == 0:
		return "nothing"
	case c[0] == '{':
		return "an object"
	case c[0] == '[':
		return "a list"
	case c[0] == '"':
		return "a string"
	case c[0] == 't' || c[0] == 'f':
		return "a boolean"
	default:
		return "a number"
	}
}

func jsonString(s string) json.RawMessage {
	b, err := json.Marshal(s)
	if err != nil {
		// Marshalling a string cannot fail (invalid UTF-8 is replaced).
		return json.RawMessage(`""`)
	}
	return b
}

// compact removes insignificant space from valid JSON.
func compact(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}
