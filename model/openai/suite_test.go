package openai_test

import (
	"testing"

	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/modeltest"
	"github.com/svc-dev/svc/model/openai"
)

// TestSuite runs the model provider contract suite on the provider,
// against llmsim answering every request per the suite's script.
func TestSuite(t *testing.T) {
	modeltest.Run(t, modeltest.Provider{
		Name:  openai.Provider,
		Model: scripted,
		Failures: []modeltest.Failure{
			modeltest.RateLimited, modeltest.Overloaded, modeltest.ServerError,
			modeltest.AuthFailed, modeltest.InvalidRequest, modeltest.Malformed,
		},
		SplitUsage: true,
		BadSettings: []map[string]any{
			{"temperature": "hot"},
			{"max_tokens": 1.5},
			{"max_tokens": -1},
			{"seed": "x"},
			{"stop": 5},
			{"stop": []any{"a", 1}},
			{"timeout": "soon"},
			{"timeout": 0},
			{"max_retries": -1},
			{"base_url": "localhost:8080"},
			{"api_key": 42},
			{"stream": "yes"},
			{"stream_options": map[string]any{"include_usage": false}},
			{"stream_idle_timeout_ms": 0},
			{"messages": []any{}},
			{"model": "other"},
			{"extra": func() {}},
		},
	})
}

// scripted starts llmsim with one rule that follows s on every request,
// and returns a model talking to it through the real SDK.
func scripted(t *testing.T, s modeltest.Script) modeltest.Scripted {
	t.Helper()
	sim := llmsim.New(llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{modeltest.SimRule(t, s, "503")}}})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	m, err := openai.NewWithConfig(modeltest.ModelName, openai.Config{BaseURL: sim.URL() + "/v1", APIKey: "sk-test"})
	if err != nil {
		t.Fatal(err)
	}
	return modeltest.Scripted{Model: m, Calls: func() int { return sim.Stats()["sk-test/"+modeltest.ModelName] }}
}
