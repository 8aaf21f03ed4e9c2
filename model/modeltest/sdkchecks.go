package modeltest

// The checks every provider that speaks a hosted API runs against llmsim,
// through its real SDK client: newModel returns the provider's model of
// modelName pointed at a simulator of the given config.

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model"
)

// ContextWindowErrorThroughSDK: a prompt longer than the model's context window is a context-length
// error (model.ClassContext), which the agent loop turns into a
// ContextError instead of trying fallbacks blindly; a prompt that fits is
// answered. Against llmsim, through the real SDK.
func ContextWindowErrorThroughSDK(t *testing.T, newModel func(*testing.T, llmsim.Config) svc.Model, modelName string) {
	t.Helper()
	m := newModel(t, llmsim.Config{ContextWindow: 50})
	ask := func(text string) error {
		input, _ := json.Marshal(text)
		_, err := m.Generate(t.Context(), svc.ModelRequest{Model: modelName,
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

// RateLimitHeadersThroughSDK: every answer, success or 429, plain or streamed, carries what its
// rate-limit headers said (llmsim sends the provider's own), which a
// learned rate limit paces the key by.
func RateLimitHeadersThroughSDK(t *testing.T, newModel func(*testing.T, llmsim.Config) svc.Model, modelName string) {
	t.Helper()
	// Two requests per 10 s at once, refilled at 12 a minute.
	m := newModel(t, llmsim.Config{RPM: 12, TPM: 60000, Window: 10 * time.Second})
	noRetry := map[string]any{"max_retries": 0}
	first, err := m.Generate(t.Context(), asks(modelName, "hello", noRetry))
	if err != nil {
		t.Fatal(err)
	}
	h := first.RateLimit
	if h == nil || h.Requests.Limit != 12 || h.Requests.Remaining != 1 || h.Requests.Reset <= 0 || h.Requests.Reset > 10*time.Second ||
		h.Tokens.Limit != 60000 || h.Tokens.Remaining <= 0 || h.Tokens.Remaining >= 10000 {
		t.Fatalf("first answer's hint %+v; want 12 requests a minute with 1 left, 60,000 tokens with under 10,000 left", deref(h))
	}
	req := asks(modelName, "hello", noRetry)
	req.OnDelta = func(string) {}
	second, err := m.Generate(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if h := second.RateLimit; h == nil || h.Requests.Limit != 12 || h.Requests.Remaining != 0 {
		t.Fatalf("streamed answer's hint %+v; want 12 requests a minute with none left", deref(h))
	}
	for _, stream := range []bool{false, true} {
		req := asks(modelName, "hello", noRetry)
		if stream {
			req.OnDelta = func(string) {}
		}
		_, err = m.Generate(t.Context(), req)
		pe, ok := errors.AsType[*model.ProviderError](err)
		if !ok || pe.Status != 429 {
			t.Fatalf("third call (stream %v): %v, want a 429", stream, err)
		}
		if h := pe.RateLimit; h == nil || h.Requests.Limit != 12 || h.Requests.Remaining != 0 || h.RetryAfter < time.Second {
			t.Errorf("429's hint (stream %v) %+v; want 12 requests a minute, none left, Retry-After", stream, deref(h))
		}
	}
}

func deref(h *svc.RateHint) any {
	if h == nil {
		return nil
	}
	return *h
}

// asks is a request of modelName for the user's text.
func asks(modelName, text string, settings map[string]any) svc.ModelRequest {
	in, _ := json.Marshal(text)
	return svc.ModelRequest{Model: modelName, Messages: []svc.Message{{Role: svc.RoleUser, Content: in}}, Settings: settings}
}
