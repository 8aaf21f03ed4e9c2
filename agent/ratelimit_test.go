package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/svc-dev/svc"
	"github.com/svc-dev/svc/agent"
	"github.com/svc-dev/svc/model"
	"github.com/svc-dev/svc/ratelimit"
)

// The runtime's flow-control settings (model_settings.rate_limit and
// max_concurrent_requests) are checked at compile, draw from the limits
// they name, and never reach the provider.
func TestRateLimitSettings(t *testing.T) {
	var seen map[string]any
	reg := model.NewRegistry()
	reg.Register("fake", func(string) (svc.Model, error) {
		return svc.ModelFunc(func(_ context.Context, req svc.ModelRequest) (svc.ModelResponse, error) {
			seen = req.Settings
			return svc.ModelResponse{Output: json.RawMessage(`"ok"`), InputTokens: 3, OutputTokens: 2}, nil
		}), nil
	})
	set := ratelimit.NewSet(map[string]svc.RateLimit{"shared": {RequestsPerMinute: 6000}}, ratelimit.Options{})
	t.Cleanup(set.Close)
	compile := func(settings map[string]any) (*agent.Compiled, error) {
		return agent.Compile(svc.Agent{Name: "a", Model: "fake:m", ModelSettings: settings}, reg, agent.WithRateLimits(set))
	}
	for _, c := range []struct {
		settings map[string]any
		want     string
	}{
		{map[string]any{"rate_limit": "nope"}, `model_settings.rate_limit: no limit "nope"`},
		{map[string]any{"rate_limit": 5}, "model_settings.rate_limit: want the name of a limit"},
		{map[string]any{"max_concurrent_requests": 0}, "model_settings.max_concurrent_requests: want a positive whole number"},
		{map[string]any{"max_concurrent_requests": 2.5}, "model_settings.max_concurrent_requests: want a positive whole number"},
	} {
		if _, err := compile(c.settings); err == nil || !strings.Contains(err.Error(), c.want) || svc.KindOf(err) != svc.KindSpecValidation {
			t.Errorf("model_settings %v: %v; want a SpecValidationError containing %q", c.settings, err, c.want)
		}
	}
	comp, err := compile(map[string]any{"rate_limit": "shared", "max_concurrent_requests": 3, "temperature": 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Run(t.Context(), &agent.Invocation{Agent: comp, Input: json.RawMessage(`"x"`)}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen["temperature"] != 0.5 {
		t.Errorf("the provider got settings %v; want the agent's without the runtime's keys", seen)
	}
	stats := set.Stats()
	if len(stats) != 2 || stats[0].Name != "fake:m (max_concurrent_requests 3)" || stats[1].Name != "shared" ||
		stats[0].Calls != 1 || stats[1].Calls != 1 || stats[1].Tokens != 5 {
		t.Errorf("limits %+v; want the named one and the model's cap, each with the call and its 5 tokens", stats)
	}
}
