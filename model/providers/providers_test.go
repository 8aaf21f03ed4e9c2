package providers_test

import (
	"testing"

	"github.com/svc-dev/svc/model/providers"
)

// Every provider the binary documents resolves, without an API key: keys
// are checked when a call is made, so specs validate on a machine without
// them.
func TestDefaultResolvesEveryProvider(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "")
	t.Setenv("ANTHROPIC_API_KEY", "")
	r := providers.Default()
	for _, k := range []string{"AZURE_OPENAI_ENDPOINT", "AZURE_OPENAI_API_KEY", "GROQ_API_KEY", "VLLM_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY"} {
		t.Setenv(k, "")
	}
	for _, id := range []string{"test:echo", "openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "openai:llama3.2",
		"azure:my-gpt-4o-deployment", "groq:llama-3.3-70b-versatile", "mistral:mistral-large-latest", "together:meta-llama/Llama-3.3-70B-Instruct-Turbo",
		"openrouter:anthropic/claude-sonnet-4.5", "ollama:llama3.2", "vllm:Qwen/Qwen2.5-7B-Instruct",
		"google:gemini-2.5-flash", "gemini:gemini-2.5-pro", "bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock:us.amazon.nova-pro-v1:0"} {
		if _, err := r.Resolve(id); err != nil {
			t.Errorf("Resolve(%q): %v", id, err)
		}
	}
	if _, err := r.Resolve("cohere:command-r"); err == nil {
		t.Error("Resolve(cohere:command-r) succeeded; no such provider is linked")
	}
}
