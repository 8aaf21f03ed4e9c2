package svc

import (
	"context"
	"encoding/json"
	"time"
)

// Role of a message in a model conversation.
type Role string

// Roles.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one turn of a conversation with a model.
type Message struct {
	Role Role `json:"role"`
	// Content is a JSON value: the task input for the first user message,
	// the answer for an assistant message, the result for a tool message.
	// A JSON string is plain text to a real model.
	Content json.RawMessage `json:"content,omitempty"`
	// ToolCalls are the calls an assistant message asks for.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// ToolCallID links a tool message to the call it answers.
	ToolCallID string `json:"tool_call_id,omitempty"`
	// IsError marks a tool message that reports a failed call.
	IsError bool `json:"is_error,omitempty"`
}

// ToolCall is a model's request to call a tool.
type ToolCall struct {
	ID        string          `json:"id"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ToolSpec describes a tool to a model.
type ToolSpec struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// ModelRequest is one call to a model.
type ModelRequest struct {
	// Model is the name part of provider:name.
	Model        string
	Instructions string
	Messages     []Message
	Tools        []ToolSpec
	// OutputSchema, when set, is the JSON Schema the final answer must meet.
	OutputSchema json.RawMessage
	Settings     map[string]any
	// OnDelta, when set, asks the model to stream its answer and receives
	// each text fragment as it arrives, in order, from the goroutine that
	// called Generate, before Generate returns. A model that cannot stream
	// ignores it and answers at once. The fragments are not usage: the
	// response's token counts are the call's.
	OnDelta func(text string)
	// ServerTools name the tools the model's provider runs itself during
	// the call (an agent's builtin_tools such as web_search): the provider
	// offers them to the model, and their uses come back in
	// ModelResponse.ServerToolUses, never as ToolCalls.
	ServerTools []string
}

// ModelResponse is a model's answer: either tool calls to make, or a final
// output.
type ModelResponse struct {
	ToolCalls []ToolCall
	// Output is the final answer as a JSON value (a JSON string for text).
	Output       json.RawMessage
	InputTokens  int64
	OutputTokens int64
	// CachedInputTokens are the part of InputTokens the provider read from
	// its prompt cache (Anthropic's cache_read_input_tokens, OpenAI's
	// prompt_tokens_details.cached_tokens): priced at the cheaper cached
	// rate, counted in the result's metadata.cached_tokens.
	CachedInputTokens int64
	// TokensUsed is the total; when zero, InputTokens+OutputTokens is used.
	TokensUsed int64
	// CostUSD is the call's cost when the provider knows it.
	CostUSD float64
	// RateLimit is what the answer's headers said of the provider's rate
	// limits (nil: nothing); a learned rate limit paces the key by it.
	RateLimit *RateHint
	// ServerToolUses are the uses of the request's ServerTools the
	// provider made while answering, in order.
	ServerToolUses []ServerToolUse
}

// ServerToolUse is one use of a provider-side tool: what the model asked
// (Input, such as a web search's query) and what the provider's tool
// gave back (Result, its result block as the provider sent it).
type ServerToolUse struct {
	ID     string          `json:"id"`
	Name   string          `json:"name"`
	Input  json.RawMessage `json:"input,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// RateHint is what a provider's answer said of its rate limits, read from
// its headers (OpenAI x-ratelimit-*, Anthropic anthropic-ratelimit-*,
// Retry-After) by package model.
type RateHint struct {
	// Requests and Tokens are the per-minute request and token limits.
	Requests, Tokens RateWindow
	// RetryAfter is the wait the provider asked for (0: none).
	RetryAfter time.Duration
}

// RateWindow is one limit as an answer stated it.
type RateWindow struct {
	// Limit is the limit per minute; 0 when the answer did not say, and
	// then the other fields mean nothing.
	Limit int64
	// Remaining is what is left of it now (Limit when not said).
	Remaining int64
	// Reset is how long until the limit is whole again (0: not said).
	Reset time.Duration
}

// Tokens is the total tokens of the response.
func (r *ModelResponse) Tokens() int64 {
	if r.TokensUsed > 0 {
		return r.TokensUsed
	}
	return r.InputTokens + r.OutputTokens
}

// Model is a language model behind a provider. Generate must honour ctx:
// cancelling it aborts the call. Implementations are safe for concurrent use.
type Model interface {
	Generate(ctx context.Context, req ModelRequest) (ModelResponse, error)
}

// ModelFunc adapts a function to Model.
type ModelFunc func(ctx context.Context, req ModelRequest) (ModelResponse, error)

// Generate calls f.
func (f ModelFunc) Generate(ctx context.Context, req ModelRequest) (ModelResponse, error) {
	return f(ctx, req)
}
