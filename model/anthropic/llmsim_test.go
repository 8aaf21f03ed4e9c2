package anthropic_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
)

// A prompt longer than the model's context window is a context-length
// error (model.ClassContext), which the agent loop turns into a
// ContextError instead of trying fallbacks blindly; a prompt that fits is
// answered. Against llmsim, through the real SDK.
func TestContextWindowErrorThroughSDK(t *testing.T) {
	m := simModel(t, llmsim.Config{ContextWindow: 50})
	ask := func(text string) error {
		input, _ := json.Marshal(text)
		_, err := m.Generate(t.Context(), svc.ModelRequest{Model: "claude-haiku-4-5",
			Messages: []svc.Message{{Role: svc.RoleUser, Content: input}}, Settings: map[string]any{"max_retries": 0}})
		return err
	}
	if err := ask("hello"); err != nil {
		t.Fatalf("a short prompt: %v", err)
	}
	err := ask(strings.Repeat("many words ", 200))
	if !model.IsContextError(err) {
		t.Fatalf("a prompt over the window: %v, want a context-length ProviderError", err)
	}
	if model.CanFallback(err) {
		t.Error("a context-length error may fall back blindly")
	}
}
