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
	for _, id := range []string{"test:echo", "openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5", "openai:llama3.2"} {
		if _, err := r.Resolve(id); err != nil {
			t.Errorf("Resolve(%q): %v", id, err)
		}
	}
	if _, err := r.Resolve("gemini:pro"); err == nil {
		t.Error("Resolve(gemini:pro) succeeded; no such provider is linked")
	}
}
