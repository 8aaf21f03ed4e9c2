package openai_test

import (
	"testing"

	svc "github.com/svc-dev/svc"
	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/modeltest"
	"github.com/svc-dev/svc/model/openai"
)

// The Batch API through the SDK's Files and Batches services (modeltest).
func TestBatchThroughSDK(t *testing.T) {
	modeltest.BatchThroughSDK(t, "openai", func(t *testing.T, sim *llmsim.Server) svc.Model {
		m, err := openai.NewWithConfig("gpt-4o-mini", openai.Config{BaseURL: sim.URL() + "/v1", APIKey: "sk-test"})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}, "gpt-4o-mini")
}

// A preset's model and Azure's are plain models: their services have no
// Batch API this package speaks.
func TestOnlyOpenAIHasBatches(t *testing.T) {
	m, err := openai.NewWithConfig("m", openai.Config{Provider: "groq", BaseURL: "http://127.0.0.1:1/v1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(svc.BatchModel); ok {
		t.Error("a preset's model claims the Batch API")
	}
	m, err = openai.New("gpt-4o-mini")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.(svc.BatchModel); !ok {
		t.Error("an openai model is not a svc.BatchModel")
	}
}
