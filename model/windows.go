package model

import "strings"

// ContextWindows are the context windows, in tokens, of the models of the
// built-in price table, as their providers publish them (checked
// 2025-11). The agent loop reads them after a context-length error: a
// fallback model is tried only when its window is larger than the one
// that refused the prompt.
var ContextWindows = map[string]int{
	"openai:gpt-5":         400_000,
	"openai:gpt-5-mini":    400_000,
	"openai:gpt-5-nano":    400_000,
	"openai:gpt-4.1":       1_047_576,
	"openai:gpt-4.1-mini":  1_047_576,
	"openai:gpt-4.1-nano":  1_047_576,
	"openai:gpt-4o":        128_000,
	"openai:gpt-4o-mini":   128_000,
	"openai:gpt-4-turbo":   128_000,
	"openai:gpt-3.5-turbo": 16_385,
	"openai:o1":            200_000,
	"openai:o3":            200_000,
	"openai:o3-mini":       200_000,
	"openai:o4-mini":       200_000,

	"anthropic:claude-opus-4-5":   200_000,
	"anthropic:claude-opus-4-1":   200_000,
	"anthropic:claude-opus-4":     200_000,
	"anthropic:claude-opus-4-0":   200_000,
	"anthropic:claude-sonnet-4-5": 200_000,
	"anthropic:claude-sonnet-4":   200_000,
	"anthropic:claude-sonnet-4-0": 200_000,
	"anthropic:claude-haiku-4-5":  200_000,
	"anthropic:claude-3-7-sonnet": 200_000,
	"anthropic:claude-3-5-sonnet": 200_000,
	"anthropic:claude-3-5-haiku":  200_000,
	"anthropic:claude-3-opus":     200_000,
	"anthropic:claude-3-haiku":    200_000,

	"google:gemini-2.5-pro":        1_048_576,
	"google:gemini-2.5-flash":      1_048_576,
	"google:gemini-2.5-flash-lite": 1_048_576,
	"google:gemini-2.0-flash":      1_048_576,
	"google:gemini-2.0-flash-lite": 1_048_576,
	"gemini:gemini-2.5-pro":        1_048_576,
	"gemini:gemini-2.5-flash":      1_048_576,
	"gemini:gemini-2.5-flash-lite": 1_048_576,
	"gemini:gemini-2.0-flash":      1_048_576,
	"gemini:gemini-2.0-flash-lite": 1_048_576,

	"bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0": 200_000,
	"bedrock:anthropic.claude-haiku-4-5-20251001-v1:0":  200_000,
	"bedrock:amazon.nova-pro-v1:0":                      300_000,
	"bedrock:amazon.nova-lite-v1:0":                     300_000,
	"bedrock:amazon.nova-micro-v1:0":                    128_000,

	"azure:gpt-4o":      128_000,
	"azure:gpt-4o-mini": 128_000,
	"azure:gpt-4.1":     1_047_576,

	"groq:llama-3.3-70b-versatile": 131_072,
	"groq:llama-3.1-8b-instant":    131_072,
}

// ContextWindow returns the context window of the model id
// ("provider:name"), and false when it is not known. A name with a
// snapshot date ("gpt-4o-2024-08-06", "claude-sonnet-4-20250514") has the
// window of its base name, as for prices.
func ContextWindow(id string) (int, bool) {
	if w, ok := ContextWindows[id]; ok {
		return w, true
	}
	for base := id; ; {
		i := strings.LastIndexByte(base, '-')
		if i < 0 || !strings.Contains(base[:i], ":") {
			return 0, false
		}
		base = base[:i]
		if w, ok := ContextWindows[base]; ok {
			return w, true
		}
	}
}
