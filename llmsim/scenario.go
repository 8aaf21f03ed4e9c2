package llmsim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Scenario is the scripted behaviour: rules tried in order against each
// request; the first that matches answers. No match echoes the last user
// message.
type Scenario struct {
	Rules []Rule `yaml:"rules"`
}

// Rule pairs a match with the answer and any fault to inject.
type Rule struct {
	Match Match `yaml:"match"`
	Reply Reply `yaml:"reply"`
	// Fault is "400", "401", "429", "500", "503", "529", "reset" or
	// "malformed"; empty for none.
	Fault string `yaml:"fault"`
	// Message replaces the error message of a status fault.
	Message string `yaml:"message"`
	// RetryAfterMs, when set, sends retry-after-ms with a status fault:
	// the header both SDKs read first, so that retries wait milliseconds.
	RetryAfterMs int `yaml:"retry_after_ms"`
	// Hang holds the request without sending a byte until the client
	// gives up (or the server closes).
	Hang bool `yaml:"hang"`
	// StallAfterTokens makes a streamed answer stop sending after that
	// many tokens, holding the connection open until the client gives up.
	StallAfterTokens int    `yaml:"stall_after_tokens"`
	Usage            *Usage `yaml:"usage"`
	// DelayMs, when set, is the latency to the first token of this rule's
	// answers in milliseconds, in place of a draw from Config.FirstToken:
	// so that one model of a test answers slowly and the others at once.
	DelayMs int `yaml:"delay_ms"`
}

// Match selects requests; empty fields match anything.
type Match struct {
	Contains string `yaml:"contains"` // substring of the last user message
	// Prompt is a substring of any message of the conversation: the
	// system prompt, user and assistant turns, tool calls and tool
	// results (not the tool definitions). A tool result is not a user
	// message, so this is how a rule answers the turn after a tool call.
	Prompt string `yaml:"prompt"`
	Model  string `yaml:"model"`
	Key    string `yaml:"key"`
}

// Reply is a scripted answer.
type Reply struct {
	Text      string     `yaml:"text"`
	ToolCalls []ToolCall `yaml:"tool_calls"`
}

// ToolCall is a scripted call; Arguments is the JSON object as text.
type ToolCall struct {
	Name      string `yaml:"name"`
	Arguments string `yaml:"arguments"`
}

// Usage overrides the counted tokens of an answer.
type Usage struct {
	InputTokens  int `yaml:"input_tokens"`
	OutputTokens int `yaml:"output_tokens"`
}

func (m Match) matches(q *request) bool {
	return (m.Contains == "" || strings.Contains(q.Last, m.Contains)) &&
		(m.Prompt == "" || slices.ContainsFunc(q.Messages, func(t string) bool { return strings.Contains(t, m.Prompt) })) &&
		(m.Model == "" || m.Model == q.Model) &&
		(m.Key == "" || m.Key == q.key)
}

// LoadScenario reads a YAML scenario. Unknown fields are errors, and
// every error names the file and line so a typo is found at once.
func LoadScenario(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("llmsim: scenario: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var sc Scenario
	if err := dec.Decode(&sc); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			return nil, fmt.Errorf("llmsim: scenario %s: %s", path, strings.Join(te.Errors, "; "))
		}
		return nil, fmt.Errorf("llmsim: scenario %s: %w", path, err)
	}
	for i, r := range sc.Rules {
		if r.DelayMs < 0 {
			return nil, fmt.Errorf("llmsim: scenario %s: rules[%d].delay_ms: %d is negative", path, i, r.DelayMs)
		}
		switch r.Fault {
		case "", "reset", "malformed":
		default:
			if _, ok := statusFaults[r.Fault]; !ok {
				return nil, fmt.Errorf("llmsim: scenario %s: rules[%d].fault: %q is not one of 400, 401, 429, 500, 503, 529, reset, malformed", path, i, r.Fault)
			}
		}
	}
	return &sc, nil
}

// statusFault is an error answer a rule can ask for, in each API's words.
type statusFault struct {
	status               int
	openAIType, anthType string
	openAICode, message  string
}

var statusFaults = map[string]statusFault{
	"400": {400, "invalid_request_error", "invalid_request_error", "", "Invalid request (injected)."},
	"401": {401, "invalid_request_error", "authentication_error", "invalid_api_key", "Incorrect API key provided (injected)."},
	"429": {429, "requests", "rate_limit_error", "rate_limit_exceeded", "Rate limit reached (injected)."},
	"500": {500, "api_error", "api_error", "", "Internal server error (injected)."},
	"503": {503, "server_error", "overloaded_error", "", "The server is overloaded (injected)."},
	"529": {529, "overloaded_error", "overloaded_error", "", "Overloaded"},
}
