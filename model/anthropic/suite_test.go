package anthropic

import (
	"net/http"
	"testing"

	"github.com/svc-dev/svc/llmsim"
	"github.com/svc-dev/svc/model/modeltest"
)

// TestSuite runs the model provider contract suite on the provider,
// against llmsim answering every request per the suite's script.
func TestSuite(t *testing.T) {
	modeltest.Run(t, modeltest.Provider{
		Name:  Provider,
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
			{"top_k": []any{1}},
			{"stop": []any{1, 2}},
			{"structured_output": "magic"},
			{"api_key": 42},
			{"base_url": "not a url"},
		},
	})
}

// scripted starts llmsim with one rule that follows s on every request,
// and returns a model talking to it through the real SDK.
func scripted(t *testing.T, s modeltest.Script) modeltest.Scripted {
	t.Helper()
	sim := llmsim.New(llmsim.Config{Scenario: &llmsim.Scenario{Rules: []llmsim.Rule{modeltest.SimRule(t, s, "529")}}})
	if err := sim.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	m, err := NewWithConfig(modeltest.ModelName, Config{BaseURL: sim.URL(), APIKey: "sk-test", HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		t.Fatal(err)
	}
	return modeltest.Scripted{Model: m, Calls: func() int { return sim.Stats()["sk-test/"+modeltest.ModelName] }}
}
