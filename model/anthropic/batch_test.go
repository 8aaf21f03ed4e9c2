package anthropic_test

import (
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/anthropic"
	"github.com/svc-dev/svc/model/modeltest"
)

// Message Batches through the SDK's Messages.Batches service (modeltest).
func TestBatchThroughSDK(t *testing.T) {
	modeltest.BatchThroughSDK(t, "anthropic", func(t *testing.T, sim *llmsim.Server) svc.Model {
		m, err := anthropic.NewWithConfig("claude-haiku-4-5", anthropic.Config{BaseURL: sim.URL(), APIKey: "sk-test", MaxRetries: -1})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}, "claude-haiku-4-5")
}
