package anthropic_test

import (
	"testing"

	"github.com/svc-dev/svc/model/modeltest"
)

// A prompt longer than the model's context window is a context-length
// error the agent loop does not fall back from blindly (modeltest).
func TestContextWindowErrorThroughSDK(t *testing.T) {
	modeltest.ContextWindowErrorThroughSDK(t, simModel, "claude-haiku-4-5")
}

// Every answer carries its rate-limit headers (modeltest).
func TestRateLimitHeadersThroughSDK(t *testing.T) {
	modeltest.RateLimitHeadersThroughSDK(t, simModel, "claude-haiku-4-5")
}
